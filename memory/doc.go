// Package memory is an in-memory outbox.Publisher for tests: it confirms at
// once, records every message, and can be told to fail.
//
//	pub := memory.New()
//	relay, _ := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
//	...
//	msgs := pub.Messages()
//
// FailWith makes it fail as a broker would (outbox.Unavailable for an
// outage, outbox.Permanent for a bad message), to test a relay's handling.
package memory
