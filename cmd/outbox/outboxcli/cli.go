package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgoutbox/outbox"
)

// Exit codes. They are part of the command's interface: scripts and init
// containers branch on them.
const (
	ExitOK           = 0 // success
	ExitFailure      = 1 // runtime failure
	ExitUsage        = 2 // usage or configuration error; nothing was done
	ExitDatabase     = 3 // cannot connect to the database
	ExitNotMigrated  = 4 // the outbox table is missing or not migrated
	ExitDrainTimeout = 5 // relay: the batch in flight outlived --drain-timeout
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	// options builds the command's flag set around a fresh settings value;
	// run is called with it once it is parsed.
	options func() (*options, func(ctx context.Context, c *cli, o *options) error)
}

// commands lists every subcommand in the order `outbox --help` shows them.
func commands() []command {
	return []command{
		{"demo", "show the pattern end to end on a local PostgreSQL, with an embedded NATS JetStream", demoCommand},
		{"migrate", "apply pending migrations; `migrate status`; `migrate sql` prints them", migrateCommand},
		{"relay", "run the relay until SIGINT or SIGTERM, then drain", relayCommand},
		{"status", "pending events, oldest pending age, dead letters, throughput, per event type", statusCommand},
		{"dead-letters", "list dead letters (never their payloads unless --show-payload)", deadLettersCommand},
		{"retry", "re-queue events by id, or dead letters by type or all (the manual retry path)", retryCommand},
		{"console", "serve the operator console: state, dead-letter triage and actions, timelines", consoleCommand},
		{"cleanup", "delete processed events older than a retention, in bounded batches", cleanupCommand},
		{"version", "print the version", versionCommand},
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
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			return c.main(ctx, []string{args[1], "--help"})
		}
		c.usage(c.stdout)
		return ExitOK
	}
	for _, cmd := range commands() {
		if cmd.name != name {
			continue
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
	if errors.Is(err, outbox.ErrNotMigrated) {
		code = ExitNotMigrated
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
func oneLine(s string) string {
	s = colonNewline.ReplaceAllString(strings.TrimSpace(s), ": ")
	return newline.ReplaceAllString(s, "; ")
}

// configFields maps the library's config field names, as its validation
// errors spell them, to the flags that set them.
var configFields = map[string]string{
	"BatchSize": "--batch-size", "Workers": "--workers", "PollInterval": "--poll-interval",
	"MaxAttempts": "--max-attempts", "RetryBackoff": "--retry-base/--retry-max",
	"OutageBackoff": "--outage-base/--outage-max", "PublishTimeout": "--publish-timeout",
	"StatsInterval": "--stats-interval", "Retention": "--retention",
	"CleanupInterval": "--cleanup-interval", "CleanupBatch": "--cleanup-batch",
	"RescanInterval": "--rescan-interval", "BatchDelay": "--batch-delay", "BatchDelayAbove": "--batch-delay-above",
	"schema": "--schema", "table": "--table",
}

var configField = regexp.MustCompile(`(?:outbox: )?(?:Relay|Admin|Migrate|Writer)Config\.(\w+)`)

// flagError rewrites a library validation error ("outbox:
// RelayConfig.BatchSize: ...") in terms of the flag that set the field, as a
// usage error.
func flagError(err error) error {
	msg := configField.ReplaceAllStringFunc(err.Error(), func(m string) string {
		field := configField.FindStringSubmatch(m)[1]
		if f, ok := configFields[field]; ok {
			return f
		}
		return m
	})
	return usageErr("%s", msg)
}

const exitCodesHelp = `Exit codes:
  0  success
  1  runtime failure
  2  usage or configuration error (nothing was done)
  3  cannot connect to the database (unreachable, authentication, no such database)
  4  the outbox table is missing or not migrated: run outbox migrate
  5  relay: the batch in flight outlived --drain-timeout after SIGINT/SIGTERM
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

func versionCommand() (*options, func(context.Context, *cli, *options) error) {
	o := newOptions("version", "", "Prints the version of the outbox command and its module.")
	return o, func(_ context.Context, c *cli, _ *options) error {
		v := "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		fmt.Fprintf(c.stdout, "outbox %s\n", v)
		return nil
	}
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
