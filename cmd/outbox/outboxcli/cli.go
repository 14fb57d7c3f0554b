package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// Exit codes. They are part of the command's interface: scripts and init
// containers branch on them.
const (
	ExitOK           = 0 // success
	ExitFailure      = 1 // runtime failure
	ExitUsage        = 2 // usage or configuration error, a missing replication prerequisite (--source wal) or privilege; nothing was done
	ExitDatabase     = 3 // cannot connect to the database (TLS refused too), or it stopped answering (--statement-timeout)
	ExitNotMigrated  = 4 // the outbox table is missing or not migrated
	ExitDrainTimeout = 5 // relay: the batch in flight outlived --drain-timeout
	ExitNotFound     = 6 // retry, dead-letters discard, cancel, replay: some ids were left alone (named on stderr); the rest was done
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// options builds the command's flag set around a fresh settings value;
	// run is called with it once it is parsed.
	options func() (*options, func(ctx context.Context, c *cli, o *options) error)
	// subs are subcommands with flags of their own ("dead-letters
	// discard"); a subcommand sharing its parent's flags is handled by the
	// parent (options.subs).
	subs []command
}

// commands lists every subcommand in the order `outbox --help` shows them.
func commands() []command {
	return []command{
		{"demo", "show the pattern end to end on a local PostgreSQL, with an embedded NATS JetStream", demoCommand, nil},
		{"migrate", "apply pending migrations; `migrate status`; `migrate sql` prints them", migrateCommand, nil},
		{"relay", "run the relay until SIGINT or SIGTERM, then drain", relayCommand, nil},
		{"status", "pending events, oldest pending age, dead letters, throughput, per event type", statusCommand, nil},
		{"dead-letters", "list dead letters (never their payloads unless --show-payload), --group-by error; `dead-letters discard`", deadLettersCommand,
			[]command{{"discard", "delete dead letters for good", discardCommand, nil}}},
		{"retry", "re-queue events by id, or dead letters by type, error, age or all (the manual retry path)", retryCommand, nil},
		{"cancel", "delete events not yet published, by id", cancelCommand, nil},
		{"replay", "re-queue delivered events (same-id or new-id), in their original order; `replay list`, `replay cancel`", replayCommand,
			[]command{{"list", "list replays", replayListCommand, nil}, {"cancel", "cancel a replay", replayCancelCommand, nil}}},
		{"console", "serve the operator console: state, dead-letter triage and actions, timelines", consoleCommand, nil},
		{"cleanup", "delete processed events older than a retention, in bounded batches", cleanupCommand, nil},
		{"archive", "move processed events older than an age to the archive table, in bounded batches", archiveCommand, nil},
		{"version", "print the version (same as --version)", versionCommand, nil},
	}
}

// cli is one invocation's environment: where output goes and how the
// environment is read. Nothing in this package reads os.Getenv or writes to
// os.Stdout directly.
type cli struct {
	stdout, stderr io.Writer // redacting
	getenv         func(string) string
	red            *redactor
	// stdoutTTY and stderrTTY say whether the real streams are terminals
	// (progress redraws, text logs).
	stdoutTTY, stderrTTY bool
	// progressEvery throttles progress lines that are not redrawn in place.
	progressEvery time.Duration
}

// Main runs the outbox command with args (without the program name) and
// returns its exit code. ctx is cancelled on SIGINT/SIGTERM by the caller;
// getenv reads the environment (os.Getenv in the real command).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c := newCLI(stdout, stderr, getenv)
	return c.main(ctx, args)
}

func newCLI(stdout, stderr io.Writer, getenv func(string) string) *cli {
	red := &redactor{}
	return &cli{
		stdout:        &redactWriter{w: stdout, r: red},
		stderr:        &redactWriter{w: stderr, r: red},
		getenv:        getenv,
		red:           red,
		stdoutTTY:     isTerminal(stdout),
		stderrTTY:     isTerminal(stderr),
		progressEvery: time.Second,
	}
}

func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.usage(c.stderr)
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "--version", "-version", "-v":
		return c.main(ctx, append([]string{"version"}, args[1:]...))
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			return c.main(ctx, append(args[1:], "--help"))
		}
		c.usage(c.stdout)
		return ExitOK
	}
	for _, cmd := range commands() {
		if cmd.name != name {
			continue
		}
		for _, sub := range cmd.subs {
			if len(args) > 1 && args[1] == sub.name {
				cmd, args = sub, args[1:]
				break
			}
		}
		o, run := cmd.options()
		err := o.parse(args[1:], c.getenv, c.stdout)
		if errors.Is(err, errHelp) {
			return ExitOK
		}
		if err == nil {
			err = run(ctx, c, o)
		}
		return c.exit(err)
	}
	c.fail(fmt.Sprintf("unknown command %q (commands: %s; see outbox --help)", name, commandNames()))
	return ExitUsage
}

func commandNames() string {
	var names []string
	for _, cmd := range commands() {
		names = append(names, cmd.name)
	}
	return strings.Join(names, ", ")
}

// exitError carries an exit code with the error to print.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr is a configuration or usage error: exit code 2.
func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// errHelp means --help was printed.
var errHelp = errors.New("help requested")

// exit prints err, if any, as one line on stderr and returns the exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return ExitOK
	}
	code := ExitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if errors.Is(err, outbox.ErrNotMigrated) || errors.Is(err, outbox.ErrNotOutboxTable) {
		code = ExitNotMigrated
	}
	if errors.Is(err, outbox.ErrPrivilege) && code == ExitFailure {
		code = ExitUsage // configuration: the line names the GRANT
	}
	var ste *admin.StatementTimeoutError
	if errors.As(err, &ste) {
		// Reworded for the operator, keeping what the command added around
		// it ("(deleted 1000 before the failure)").
		msg := fmt.Sprintf("%s: no answer from the database %s within %s (--statement-timeout); the statement was abandoned: is the database up and reachable?",
			ste.Op, ste.Database, ste.Timeout)
		c.fail(strings.Replace(err.Error(), strings.TrimPrefix(ste.Error(), "outbox: "), msg, 1))
		return ExitDatabase
	}
	c.fail(err.Error())
	return code
}

// fail prints msg as the command's one-line reason.
func (c *cli) fail(msg string) {
	fmt.Fprintln(c.stderr, "outbox: "+oneLine(strings.TrimPrefix(msg, "outbox: ")))
}

var (
	colonNewline = regexp.MustCompile(`:\s*\n\s*`)
	newline      = regexp.MustCompile(`\s*\n\s*`)
)

// oneLine folds a multi-line message (pgx lists the error of each address it
// tried on a line of its own) so every failure is exactly one line.
// A line repeating the one before it is dropped: with sslmode=prefer pgx
// tries each address twice (TLS, then plain) and reports both identical
// failures.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	kept := lines[:0]
	for i, l := range lines {
		if i > 0 && strings.TrimSpace(l) != "" && strings.TrimSpace(l) == strings.TrimSpace(lines[i-1]) {
			continue
		}
		kept = append(kept, l)
	}
	s = colonNewline.ReplaceAllString(strings.Join(kept, "\n"), ": ")
	return newline.ReplaceAllString(s, "; ")
}

const exitCodesHelp = `Exit codes:
  0  success
  1  runtime failure
  2  usage or configuration error (nothing was done); also relay and
     migrate with --source wal: a logical replication prerequisite is
     missing (wal_level, the REPLICATION privilege, a free replication
     slot or WAL sender), named in one line with its fix; any command:
     the role lacks a privilege, named with its GRANT
  3  cannot connect to the database (unreachable, authentication, no such
     database, TLS refused: certificate, host name), or it did not answer a
     statement within --statement-timeout
  4  the outbox table is missing or not migrated: run outbox migrate
     (also migrate status --exit-code when a migration is pending); or a
     table of its name is not an outbox table: name the outbox otherwise
  5  relay: the batch in flight outlived --drain-timeout after SIGINT/SIGTERM
  6  retry, dead-letters discard, cancel, replay: some of the given ids
     were left alone (unknown, already published, not a dead letter, or not
     delivered yet; named on stderr); the others were done. replay cancel:
     no such replay
`

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `outbox is the relay daemon and operator's tool of pgoutbox, the transactional
outbox for Go services on PostgreSQL.

Usage:
  outbox <command> [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, cmd := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmd.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "outbox <command> --help" for a command's flags, their defaults and
environment variables.

Quick start (PostgreSQL on 127.0.0.1:5432, or set DATABASE_URL):
  go run ./cmd/outbox demo

Configuration, highest precedence first:
  1. flags                     --batch-size 200
  2. environment variables     DATABASE_URL for --database-url, and
                               OUTBOX_<FLAG> for the rest: OUTBOX_BATCH_SIZE=200
  3. a YAML config file        --config FILE or OUTBOX_CONFIG=FILE; keys are
                               flag names ("batch-size: 200"); an unknown key
                               is an error
  4. defaults
A DSN's password never appears in any output, log line or error.

`)
	fmt.Fprint(w, exitCodesHelp)
}

// isTerminal reports whether w is a character device (a terminal), without a
// dependency on x/term.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
