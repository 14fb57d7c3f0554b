package outboxcli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	r := run(t, nil, "--help")
	wantExit(t, r, ExitOK)
	for _, want := range []string{"Exit codes:", "DATABASE_URL", "OUTBOX_", "--config", "go run ./cmd/outbox demo"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("outbox --help lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, cmd := range commands() {
		if !strings.Contains(r.stdout, "  "+cmd.name+" ") {
			t.Errorf("outbox --help does not list %s", cmd.name)
		}
	}
	if r := run(t, nil, "help", "status"); r.code != ExitOK || !strings.Contains(r.stdout, "Usage: outbox status") {
		t.Errorf("outbox help status:\n%s", r)
	}
}

// Every command's --help documents every flag, its default and, for
// settings, its environment variable.
func TestCommandHelpDocumentsEveryOption(t *testing.T) {
	t.Parallel()
	for _, cmd := range commands() {
		r := run(t, nil, cmd.name, "--help")
		wantExit(t, r, ExitOK)
		o, _ := cmd.options()
		o.fs.VisitAll(func(f *flag.Flag) {
			line := ""
			for _, l := range strings.Split(r.stdout, "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "--"+f.Name+" ") || strings.TrimSpace(l) == "--"+f.Name {
					line = l
				}
			}
			if line == "" {
				t.Errorf("%s --help: no line for --%s:\n%s", cmd.name, f.Name, r.stdout)
				return
			}
			if !zeroDefault(f.DefValue) && !strings.Contains(line, "default "+f.DefValue) {
				t.Errorf("%s --help: --%s does not show its default %q: %s", cmd.name, f.Name, f.DefValue, line)
			}
			if o.isSetting(f.Name) && !strings.Contains(line, "env "+envVar(f.Name)) {
				t.Errorf("%s --help: --%s does not name %s: %s", cmd.name, f.Name, envVar(f.Name), line)
			}
		})
	}
	r := run(t, nil, "relay", "--help")
	for _, want := range []string{"default 100", "env OUTBOX_BATCH_SIZE", "env DATABASE_URL", "default {event_type}", "nats://", "stdout:", "/readyz"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("relay --help lacks %q", want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "unknown.yaml")
	if err := os.WriteFile(unknownKey, []byte("broker: nats://127.0.0.1:4222\nbatch_size: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badValue := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badValue, []byte("workers: many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notYAML := filepath.Join(dir, "list.yaml")
	if err := os.WriteFile(notYAML, []byte("- a\n- b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const dsn = "postgres://postgres@127.0.0.1:5432/test"
	withDSN := func(kv ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": dsn}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "Usage:"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", withDSN(), []string{"status", "--bogus"}, "status: unknown flag --bogus"},
		{"unknown broker scheme", withDSN(), []string{"relay", "--broker", "carrier-pigeon://coop"},
			`--broker: unknown scheme "carrier-pigeon" in "carrier-pigeon://coop" (known: amqp, amqps, eventbridge, http, https, kafka, kinesis, mqtt, mqtts, nats, pubsub, redis, rediss, sns, sqs, stdout, tls)`},
		{"broker missing", withDSN(), []string{"relay"}, "--broker: required"},
		{"broker without scheme", withDSN(), []string{"relay", "--broker", "127.0.0.1:4222"}, "--broker:"},
		{"malformed DSN", withDSN("DATABASE_URL", "postgres://postgres@127.0.0.1:notaport/test"), []string{"status"},
			"--database-url: cannot parse"},
		{"DSN missing", nil, []string{"status"}, "--database-url: required (or set DATABASE_URL)"},
		{"batch size 0", withDSN(), []string{"relay", "--broker", "stdout:", "--batch-size", "0"},
			"outbox: --batch-size: 0: must be at least 1"},
		{"negative batch delay", withDSN(), []string{"relay", "--broker", "stdout:", "--batch-delay", "-1ms"},
			"outbox: --batch-delay: -1ms: must not be negative"},
		{"batch delay past the publish timeout", withDSN(), []string{"relay", "--broker", "stdout:", "--batch-delay", "1m"},
			"--batch-delay"},
		{"rescan interval 0", withDSN(), []string{"relay", "--broker", "stdout:", "--rescan-interval", "0s"},
			"outbox: --rescan-interval: 0s: must be positive"},
		{"batch size too big", withDSN(), []string{"relay", "--broker", "stdout:", "--batch-size", "20000"},
			"outbox: --batch-size: 20000: must be between 1 and 10000"},
		{"batch size from env", withDSN("OUTBOX_BATCH_SIZE", "0"), []string{"relay", "--broker", "stdout:"},
			"--batch-size: 0: must be at least 1 (set by OUTBOX_BATCH_SIZE)"},
		{"unparsable env", withDSN("OUTBOX_WORKERS", "many"), []string{"relay", "--broker", "stdout:"},
			`--workers: "many": parse error (set by OUTBOX_WORKERS)`},
		{"unparsable flag", withDSN(), []string{"relay", "--workers", "many"}, `--workers: invalid value "many"`},
		{"retry bounds", withDSN(), []string{"relay", "--broker", "stdout:", "--retry-base", "1m", "--retry-max", "1s"},
			"--retry-base/--retry-max: base 1m0s, max 1s: need 0 < base <= max"},
		{"bad topic", withDSN(), []string{"relay", "--broker", "stdout:", "--topic", "x.{nope}"}, "--topic: topic template"},
		{"bad log format", withDSN(), []string{"relay", "--broker", "stdout:", "--log-format", "xml"}, `--log-format: "xml"`},
		{"bad http addr", withDSN(), []string{"relay", "--broker", "stdout:", "--http-addr", "9090"}, "--http-addr:"},
		{"negative retention", withDSN(), []string{"relay", "--broker", "stdout:", "--retention", "-1h"}, "--retention: -1h0m0s"},
		{"unknown key in config file", withDSN(), []string{"relay", "--config", unknownKey},
			`line 2: unknown option "batch_size"`},
		{"config file from env", withDSN("OUTBOX_CONFIG", unknownKey), []string{"status"}, `unknown option "batch_size"`},
		{"bad value in config file", withDSN(), []string{"relay", "--broker", "stdout:", "--config", badValue},
			`--workers: "many": parse error (set by ` + badValue + ` line 1)`},
		{"config file not a mapping", withDSN(), []string{"status", "--config", notYAML}, "want a mapping"},
		{"config file missing", withDSN(), []string{"status", "--config", filepath.Join(dir, "nope.yaml")}, "--config: open"},
		{"table name too long", withDSN(), []string{"status", "--table", strings.Repeat("t", 70)}, "--table:"},
		{"cleanup without retention", withDSN(), []string{"cleanup"}, "--retention: required"},
		{"retry without selector", withDSN(), []string{"retry"}, "give event ids, --all, or at least one of"},
		{"retry with two selectors", withDSN(), []string{"retry", "--all", "--type", "x"}, "--all cannot be combined with --type"},
		{"retry bad id", withDSN(), []string{"retry", "not-a-uuid"}, `"not-a-uuid" is not an event id`},
		{"dead-letters limit", withDSN(), []string{"dead-letters", "--limit", "0"}, "--limit: 0"},
		{"migrate bad subcommand", withDSN(), []string{"migrate", "sideways"}, `unexpected argument "sideways"`},
		{"demo orders", nil, []string{"demo", "--orders", "0"}, "--orders: 0"},
		{"demo broker", nil, []string{"demo", "--broker", "stdout:"}, "--broker: the demo consumes with JetStream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, tc.env, tc.args...)
			if tc.args == nil {
				if r.code != ExitUsage || !strings.Contains(r.stderr, tc.want) {
					t.Fatalf("want exit 2 and usage, got:\n%s", r)
				}
				return
			}
			wantExit(t, r, ExitUsage)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, r)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty:\n%s", r)
			}
		})
	}
}

// Precedence: flag > environment > config file > default; a config file key
// of another command is ignored.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(file, []byte("# shared by every command\nbatch-size: 7\nschema: from_file\nlimit-is-not-a-setting: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fileOK := filepath.Join(t.TempDir(), "ok.yaml")
	if err := os.WriteFile(fileOK, []byte("batch-size: 7\nschema: from_file\nbroker: nats://127.0.0.1:4222\nretention: 24h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(vars map[string]string, args ...string) *options {
		t.Helper()
		o, _ := relayCommand()
		if err := o.parse(args, env(vars), nil); err != nil {
			t.Fatalf("parse %v %v: %v", vars, args, err)
		}
		return o
	}
	val := func(o *options, name string) string { return o.fs.Lookup(name).Value.String() }

	o := parse(nil)
	if got, want := val(o, "batch-size"), fmt.Sprint(outbox.DefaultBatchSize); got != want {
		t.Errorf("default: batch-size %s, want %s", got, want)
	}
	o = parse(nil, "--config", fileOK)
	if got := val(o, "batch-size"); got != "7" {
		t.Errorf("file: batch-size %s, want 7", got)
	}
	o = parse(map[string]string{"OUTBOX_CONFIG": fileOK, "OUTBOX_BATCH_SIZE": "8"})
	if got := val(o, "batch-size"); got != "8" {
		t.Errorf("env over file: batch-size %s, want 8", got)
	}
	if got := val(o, "schema"); got != "from_file" {
		t.Errorf("file: schema %s, want from_file", got)
	}
	o = parse(map[string]string{"OUTBOX_CONFIG": fileOK, "OUTBOX_BATCH_SIZE": "8", "OUTBOX_SCHEMA": "from_env"}, "--batch-size", "9", "--schema=from_flag")
	if got := val(o, "batch-size"); got != "9" {
		t.Errorf("flag over env: batch-size %s, want 9", got)
	}
	if got := val(o, "schema"); got != "from_flag" {
		t.Errorf("flag over env: schema %s, want from_flag", got)
	}
	// A key that is no command's setting fails, even for a command that
	// would not use it.
	so, _ := statusCommand()
	if err := so.parse([]string{"--config", file}, env(nil), nil); err == nil || !strings.Contains(err.Error(), `unknown option "limit-is-not-a-setting"`) {
		t.Errorf("status with a file holding an unknown key: %v", err)
	}
	// The relay's keys in a shared file do not bother status.
	so, _ = statusCommand()
	if err := so.parse([]string{"--config", fileOK}, env(nil), nil); err != nil {
		t.Errorf("status with the relay's keys in the file: %v", err)
	}
	if got := val(so, "schema"); got != "from_file" {
		t.Errorf("status: schema %s, want from_file", got)
	}
	// Flag-only options are not read from the environment.
	so, _ = statusCommand()
	if err := so.parse(nil, env(map[string]string{"OUTBOX_JSON": "true"}), nil); err != nil {
		t.Fatal(err)
	}
	if got := val(so, "json"); got != "false" {
		t.Errorf("OUTBOX_JSON set --json to %s; it is flag-only", got)
	}
	// Positional arguments between flags.
	ro, _ := retryCommand()
	if err := ro.parse([]string{"a", "--dry-run", "b"}, env(nil), nil); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ro.args, ",") != "a,b" || val(ro, "dry-run") != "true" {
		t.Errorf("interspersed: args %v, dry-run %s", ro.args, val(ro, "dry-run"))
	}
}

func TestEnvVarNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"database-url": "DATABASE_URL", "batch-size": "OUTBOX_BATCH_SIZE", "schema": "OUTBOX_SCHEMA",
		"http-addr": "OUTBOX_HTTP_ADDR", "config": "OUTBOX_CONFIG",
	} {
		if got := envVar(name); got != want {
			t.Errorf("envVar(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestRelayFlagsReachTheLibrary: the flags added with the claim floor, the
// batch delay and delete-on-publish end up in outbox.RelayConfig; a
// --batch-delay of 0 turns the delay off rather than selecting the default.
func TestRelayFlagsReachTheLibrary(t *testing.T) {
	s := relaySettings{cfg: outbox.RelayConfig{RescanInterval: 3 * 1e9, BatchDelay: 0, BatchDelayAbove: 900, DeleteOnPublish: true}}
	cfg := s.relayConfig(nil, nil)
	if cfg.BatchDelay >= 0 || cfg.RescanInterval != 3*1e9 || cfg.BatchDelayAbove != 900 || !cfg.DeleteOnPublish {
		t.Errorf("relay config = %+v", cfg)
	}
	s.cfg.BatchDelay = 25 * 1e6
	if got := s.relayConfig(nil, nil).BatchDelay; got != 25*1e6 {
		t.Errorf("--batch-delay 25ms gave BatchDelay %s", got)
	}
}
