// Package jsonl is an outbox.Publisher that writes each message as one JSON
// line, for debugging a relay and piping events into scripts. It offers no
// durability: a successful write to the io.Writer counts as confirmation.
//
// A payload that cannot be encoded fails permanently. A failed write (a
// closed pipe, a full disk) fails every message alike, so it is
// outbox.Unavailable: the relay backs off and counts no attempt.
//
// With a CloudEvents envelope (outbox.RelayConfig.Envelope, either mode)
// each line is the CloudEvents JSON event format instead of a Line
// (docs/CLOUDEVENTS.md).
//
// The CLI's stdout: broker is this publisher on standard output.
package jsonl
