// Package outboxcli is the `outbox` command: pgoutbox's relay daemon and
// operator's tool. cmd/outbox/main.go only wires signals and the process's
// streams to Main; everything else lives here, writes to the io.Writers it is
// given and reads the environment through the getenv it is given, so every
// command is tested in-process.
//
// # The relay as a process of its own
//
// The relay can run inside the application's binary (outbox.NewRelay) or as
// this separate process:
//
//	outbox migrate --database-url postgres://app@db/app
//	outbox relay   --database-url postgres://app@db/app --broker nats://nats:4222 \
//	               --topic 'events.{event_type}' --http-addr 127.0.0.1:9090
//
// On SIGINT or SIGTERM the relay stops claiming, finishes the batches in
// flight (publish, wait for the broker's confirmations, mark them) and exits
// 0. If that takes longer than --drain-timeout (default: the publish timeout
// plus 5s) it exits 5: the unfinished batch's transaction is rolled back by
// PostgreSQL when the process's connections close, so no event is ever marked
// published without a broker confirmation; it is published again later. A
// second signal ends the process at once.
//
// --broker is a URL whose scheme selects the publisher: nats:// (and tls://
// for NATS over TLS) for NATS JetStream, kafka://, amqp:// and amqps://
// (RabbitMQ), redis:// and rediss:// (Redis Streams), sqs://, sns://,
// eventbridge://, kinesis:// (Amazon SQS, SNS, EventBridge, Kinesis),
// pubsub:// (Google Cloud Pub/Sub), mqtt:// and mqtts:// (MQTT 3.1.1),
// http:// and https:// (signed webhooks), stdout: for one JSON line per event
// (debugging). The registry is the brokers map in brokers.go; an unknown
// scheme is an error that lists the known ones. The relay never creates
// streams or topics.
//
// With --http-addr the relay serves /metrics (its outbox_* metrics plus the
// Go and process collectors, on a registry of its own), /healthz (200 while
// the process runs) and /readyz (200 when the database answers and the broker
// is connected, else 503 with the reason).
//
// # Commands
//
//	demo           the pattern end to end on a local PostgreSQL with an embedded
//	               NATS JetStream: `go run ./cmd/outbox demo`
//	migrate        apply pending migrations; `migrate status` (--exit-code: 4
//	               when one is pending); `migrate sql` (or --print) prints them
//	               for goose, golang-migrate, atlas...; --json
//	relay          run the relay until SIGINT/SIGTERM; waits for the database
//	               at start (--wait-for-db, --db-wait-timeout); exports spans
//	               over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set
//	status         pending events and the oldest one's age, dead letters,
//	               published in the last minute and hour, per event type (--json)
//	dead-letters   list dead letters: id, type, aggregate, attempts, created_at,
//	               last error; --type, --older-than, --limit, --json; payloads
//	               only with --show-payload; --group-by error|type counts them
//	               per normalised error
//	dead-letters discard
//	               delete dead letters by id, --type, --error-group,
//	               --older-than or --all, releasing the events they held;
//	               --dry-run, --json
//	retry          the manual retry path: re-queue events by id, or dead letters
//	               by --type, --error-group, --older-than or --all; prints the
//	               count; --dry-run, --json; exits 6 when some ids were left alone
//	cancel         delete events not yet published (pending, retrying, held,
//	               dead) by id, releasing the events they held; --json; exits
//	               6 when some ids were already published or unknown
//	replay         re-queue delivered events (from the table and its archive)
//	               in their original order: --mode same-id|new-id (required),
//	               by id, --type, --aggregate-type, --aggregate-id, --since,
//	               --until (RFC 3339 or a duration ago) or --all; --rate,
//	               --replay-batch, --dry-run with --sample, --json; prints the
//	               replay's id; exits 6 when some ids were unknown or not
//	               delivered yet (see docs/REPLAY.md)
//	replay list    list the last replays, newest first: mode, events selected
//	               and queued, copies pending and delivered, state; --limit,
//	               --json
//	replay cancel  cancel a replay by its id, deleting its copies not yet
//	               delivered; --json; exits 6 when there is no such replay
//	console        serve the operator console (state, dead-letter triage and
//	               actions, timelines) on --http-addr
//	cleanup        delete events published more than --retention ago, in
//	               batches of --cleanup-batch, reporting progress; --json
//	archive        move events published more than --older-than ago to the
//	               archive table (<table>_archive), --archive-batch rows per
//	               statement, reporting progress; --json. The archive is never
//	               deleted from by pgoutbox
//	version        print the version (also --version, -v); --json
//
// The commands built on admin.Admin (status, dead-letters, retry, cancel,
// replay, cleanup, archive) take --statement-timeout (OUTBOX_STATEMENT_TIMEOUT):
// a statement the database has not answered within it is abandoned and the
// command exits 3 at once. Defaults to admin.DefaultStatementTimeout
// (30s), or, when the connection string sets statement_timeout, that plus 5s.
//
// `outbox <command> --help` documents every flag with its default and
// environment variable.
//
// # Configuration
//
// Settings come from, in order of precedence: flags; environment variables
// (DATABASE_URL for --database-url, OUTBOX_<FLAG> for the rest:
// OUTBOX_BATCH_SIZE, OUTBOX_SCHEMA, OUTBOX_HTTP_ADDR...); a YAML config file
// named by --config or OUTBOX_CONFIG; defaults, which are the outbox.Default*
// constants. The file is a flat mapping whose keys are flag names:
//
//	database-url: postgres://relay@db:5432/app
//	schema: app
//	broker: nats://nats:4222
//	topic: events.{event_type}
//	batch-size: 200
//	poll-interval: 250ms
//	retention: 168h
//	http-addr: 127.0.0.1:9090
//
// One file serves every command: a key that belongs to another command is
// ignored, a key that is no command's setting is an error (with its line), so
// a typo never falls back to a default silently. Per-invocation switches
// (--json, --dry-run, --type, --show-payload...) are flags only.
//
// Invalid configuration stops the command before it does anything, with one
// line naming the setting and where its value came from:
//
//	outbox: --batch-size: 0: must be at least 1 (set by OUTBOX_BATCH_SIZE)
//
// A password in the DSN or the broker URL never appears in any output, log
// line, error, /readyz answer or metric: every line written passes through a
// redactor that masks the passwords it was given and anything shaped like
// one (redactDSN).
//
// # Exit codes
//
//	0  success
//	1  runtime failure
//	2  usage or configuration error (nothing was done), a missing
//	   privilege (named with its GRANT)
//	3  cannot connect to the database (unreachable, authentication, no such
//	   database, TLS refused), or it did not answer a statement within
//	   --statement-timeout
//	4  the outbox table is missing or not migrated: run outbox migrate
//	   (also migrate status --exit-code when a migration is pending); or a
//	   table of its name is not an outbox table: name the outbox otherwise
//	5  relay: the batch in flight outlived --drain-timeout after SIGINT/SIGTERM
//	6  retry, dead-letters discard, cancel, replay: some of the given ids
//	   were left alone (unknown, already published, not a dead letter, or
//	   not delivered yet; named on stderr); the others were done.
//	   replay cancel: no such replay
//
// Durations are Go durations (90s, 15m, 168h) or days (7d, 1.5d, 7d12h).
//
// Every failure prints exactly one line on stderr, starting with "outbox: ";
// the relay logs it first as a log entry too (JSON unless stderr is a
// terminal), with its exit code.
package outboxcli
