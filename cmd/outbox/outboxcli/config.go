package outboxcli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// options is one command's flag set. Flags are settings unless marked
// flag-only: a setting is also read from its environment variable and from the
// config file, with precedence flag > environment > file > default.
// Per-invocation switches (--json, --dry-run, filters) are flag-only.
type options struct {
	cmd      string
	synopsis string // after "outbox <cmd>"
	doc      string
	fs       *flag.FlagSet
	only     map[string]bool   // flag-only
	source   map[string]string // where a setting's value came from, for errors
	args     []string          // positional arguments
	sub      string            // subcommand, for commands that have them
	subs     []string          // accepted subcommands
	// fields maps a library config field, as *outbox.ConfigError names it,
	// to the flags that set it ("RetryBackoff": --retry-base, --retry-max).
	fields map[string][]string
}

func newOptions(cmd, synopsis, doc string) *options {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &options{cmd: cmd, synopsis: synopsis, doc: doc, fs: fs,
		only: map[string]bool{}, source: map[string]string{}, fields: map[string][]string{}}
}

// setsField records that flag sets field of a library config (a part of
// one, such as "RetryBackoff.Base", counts as setting the whole field).
func (o *options) setsField(field, flag string) {
	field, _, _ = strings.Cut(field, ".")
	o.fields[field] = append(o.fields[field], flag)
}

// flagOnly marks flags that are not settings.
func (o *options) flagOnly(names ...string) {
	for _, n := range names {
		if o.fs.Lookup(n) == nil {
			panic("outboxcli: flagOnly: no flag " + n)
		}
		o.only[n] = true
	}
}

func (o *options) isSetting(name string) bool {
	return o.fs.Lookup(name) != nil && !o.only[name] && name != "config"
}

// envVar returns the environment variable of setting name.
func envVar(name string) string {
	if name == "database-url" {
		return "DATABASE_URL"
	}
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// sourceOf describes where setting name got its value, for error messages;
// "" for a flag or a default.
func (o *options) sourceOf(name string) string {
	if s := o.source[name]; s != "" {
		return " (set by " + s + ")"
	}
	return ""
}

// settingErr is a usage error about setting name's value.
func (o *options) settingErr(name, format string, args ...any) error {
	return usageErr("--%s: %s%s", name, fmt.Sprintf(format, args...), o.sourceOf(name))
}

// parse reads args, then the environment and the config file for every
// setting the command line left unset. Positional arguments may come before,
// between or after flags.
func (o *options) parse(args []string, getenv func(string) string, stdout io.Writer) error {
	acceptDays(o.fs)
	rest := args
	for {
		if err := o.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				o.usage(stdout)
				return errHelp
			}
			return usageErr("%s: %s (see outbox %s --help)", o.cmd, o.parseErrorMessage(err), o.cmd)
		}
		rest = o.fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			o.args = append(o.args, rest[1:]...)
			break
		}
		o.args = append(o.args, rest[0])
		rest = rest[1:]
	}
	if len(o.subs) > 0 && len(o.args) > 0 {
		for _, s := range o.subs {
			if o.args[0] == s {
				o.sub, o.args = s, o.args[1:]
				break
			}
		}
	}
	onCmdLine := map[string]bool{}
	o.fs.Visit(func(f *flag.Flag) { onCmdLine[f.Name] = true })

	// The config file first, so that the environment overrides it.
	if o.fs.Lookup("config") != nil {
		path := o.fs.Lookup("config").Value.String()
		if !onCmdLine["config"] {
			path = getenv(envVar("config"))
			if path != "" {
				o.source["config"] = envVar("config")
			}
		}
		if path != "" {
			if err := o.applyFile(path, onCmdLine); err != nil {
				return err
			}
		}
	}
	var err error
	o.fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCmdLine[f.Name] || !o.isSetting(f.Name) {
			return
		}
		env := envVar(f.Name)
		v := getenv(env)
		if v == "" {
			return
		}
		o.source[f.Name] = env
		if serr := f.Value.Set(v); serr != nil {
			err = o.settingErr(f.Name, "%q: %v%s", v, serr, o.valueHint(f.Name, v))
		}
	})
	return err
}

// applyFile sets, from the YAML config file at path, every setting of this
// command that the command line did not set. A key that is no command's
// setting is an error (a typo must not silently fall back to a default); a
// key of another command is ignored, so one file serves every command.
func (o *options) applyFile(path string, onCmdLine map[string]bool) error {
	values, err := readConfigFile(path)
	if err != nil {
		return err
	}
	known := allSettings()
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return values[keys[i]].line < values[keys[j]].line })
	for _, k := range keys {
		v := values[k]
		if !known[k] {
			return usageErr("config file %s: line %d: unknown option %q (keys are flag names without dashes, such as batch-size)", path, v.line, k)
		}
		if !o.isSetting(k) || onCmdLine[k] {
			continue
		}
		o.source[k] = fmt.Sprintf("%s line %d", path, v.line)
		if err := o.fs.Set(k, v.value); err != nil {
			return o.settingErr(k, "%q: %v%s", v.value, err, o.valueHint(k, v.value))
		}
	}
	return nil
}

type fileValue struct {
	value string
	line  int
}

// readConfigFile reads a flat YAML mapping of option names to scalar values.
func readConfigFile(path string) (map[string]fileValue, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr("--config: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, usageErr("config file %s: %v", path, oneLine(err.Error()))
	}
	out := map[string]fileValue{}
	if len(doc.Content) == 0 { // empty file
		return out, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, usageErr("config file %s: line %d: want a mapping of option: value", path, root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if _, dup := out[k.Value]; dup {
			return nil, usageErr("config file %s: line %d: option %q set twice", path, k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, usageErr("config file %s: line %d: %s: want a single value", path, k.Line, k.Value)
		}
		out[k.Value] = fileValue{value: v.Value, line: k.Line}
	}
	return out, nil
}

// allSettings returns the names of every command's settings: the keys a
// config file may hold.
func allSettings() map[string]bool {
	out := map[string]bool{}
	for _, cmd := range commands() {
		o, _ := cmd.options()
		o.fs.VisitAll(func(f *flag.Flag) {
			if o.isSetting(f.Name) {
				out[f.Name] = true
			}
		})
	}
	return out
}

// usage prints the command's help: every flag with its default and, for
// settings, its environment variable.
func (o *options) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: outbox %s", o.cmd)
	if o.synopsis != "" {
		fmt.Fprintf(w, " %s", o.synopsis)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(o.doc))
	n := 0
	o.fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "\nFlags (precedence: flag > environment > config file > default):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	o.fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(dayDuration); ok {
			typ = "duration"
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		var extra []string
		if !zeroDefault(f.DefValue) {
			extra = append(extra, "default "+f.DefValue)
		}
		switch {
		case f.Name == "config":
			extra = append(extra, "env "+envVar(f.Name))
		case o.isSetting(f.Name):
			extra = append(extra, "env "+envVar(f.Name))
		}
		if len(extra) > 0 {
			usage += " (" + strings.Join(extra, "; ") + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	tw.Flush()
	fmt.Fprintf(w, "\n%s", exitCodesHelp)
}

// dbOptions are the settings of every command that talks to the database.
type dbOptions struct {
	DatabaseURL string
	Schema      string
	Table       string
	Config      string
	// StatementTimeout is admin.Config.StatementTimeout, for the commands
	// built on admin.Admin (registerAdmin); 0 means the library's default.
	StatementTimeout time.Duration
	timeout          *setting // nil unless registerAdmin
}

func (d *dbOptions) register(o *options) {
	o.fs.StringVar(&d.DatabaseURL, "database-url", "", "PostgreSQL connection string, URL (postgres://user@host:5432/db) or key=value form")
	o.fs.StringVar(&d.Schema, "schema", "", "schema of the outbox table (default: the connection's search_path)")
	o.fs.StringVar(&d.Table, "table", outbox.DefaultTable, "name of the outbox table")
	o.fs.StringVar(&d.Config, "config", "", "YAML config file; keys are flag names")
	o.setsField("Schema", "schema")
	o.setsField("Table", "table")
}

// registerAdmin is register plus --statement-timeout, for the commands
// whose statements go through admin.Admin.
func (d *dbOptions) registerAdmin(o *options) {
	d.register(o)
	st := bind("StatementTimeout", "statement-timeout", &d.StatementTimeout, 0,
		"give up on a statement the database has not answered within this long, with exit code 3 "+
			"(default "+admin.DefaultStatementTimeout.String()+", or the connection string's statement_timeout plus 5s)").
		zeroMeans("0 means the default")
	st.register(o)
	d.timeout = &st
}

// setting is a numeric or boolean setting that sets a field of a library
// config: one value of this type is all the command needs to register the
// flag, refuse a zero the library would read as "default", and report the
// library's *outbox.ConfigError about the field against the flag.
type setting struct {
	field string // the library config field; "" for a setting of the command's own
	flag  string
	ptr   any // *int, *time.Duration or *bool
	def   any // the flag's default, of the pointer's type
	usage string
	// zero says what 0 means on the command line, for settings that accept
	// it (negatives are still refused); "" refuses 0.
	zero string
}

// bind returns the setting of flag name, stored in *p, for library field.
func bind[T int | time.Duration | bool](field, name string, p *T, def T, usage string) setting {
	return setting{field: field, flag: name, ptr: p, def: def, usage: usage}
}

// zeroMeans returns st accepting 0 on the command line, with that meaning.
func (st setting) zeroMeans(meaning string) setting {
	st.zero = meaning
	return st
}

func (st setting) register(o *options) {
	switch p := st.ptr.(type) {
	case *int:
		o.fs.IntVar(p, st.flag, st.def.(int), st.usage)
	case *time.Duration:
		o.fs.DurationVar(p, st.flag, st.def.(time.Duration), st.usage)
	case *bool:
		o.fs.BoolVar(p, st.flag, st.def.(bool), st.usage)
	default:
		panic(fmt.Sprintf("outboxcli: setting %s: unsupported type %T", st.flag, st.ptr))
	}
	if st.field != "" {
		o.setsField(st.field, st.flag)
	}
}

// check refuses the zero values the library would read as "use the
// default", and negative values: on a command line they are mistakes.
func (st setting) check(o *options) error {
	var v any
	var negative, zero bool
	want := "must be positive"
	switch p := st.ptr.(type) {
	case *int:
		v, negative, zero, want = *p, *p < 0, *p == 0, "must be at least 1"
	case *time.Duration:
		v, negative, zero = *p, *p < 0, *p == 0
	default:
		return nil
	}
	switch {
	case st.zero != "" && negative:
		return o.settingErr(st.flag, "%v: must not be negative (%s)", v, st.zero)
	case st.zero == "" && (negative || zero):
		return o.settingErr(st.flag, "%v: %s", v, want)
	}
	return nil
}

// flagError reports a library error as a usage error. A *outbox.ConfigError
// about a field a flag sets names the flag(s) instead of the field.
func flagError(err error) error {
	var ce *outbox.ConfigError
	if errors.As(err, &ce) {
		if flags := flagsOf(ce.Field); len(flags) > 0 {
			return usageErr("%s: %v", strings.Join(flags, "/"), ce.Err)
		}
	}
	return usageErr("%s", err)
}

// flagsOf returns the flags that set library config field, as "--name".
func flagsOf(field string) []string {
	for _, cmd := range commands() {
		o, _ := cmd.options()
		if names := o.fields[field]; len(names) > 0 {
			out := make([]string, len(names))
			for i, n := range names {
				out[i] = "--" + n
			}
			return out
		}
	}
	return nil
}

// zeroDefault reports a default not worth showing: empty, false, zero.
func zeroDefault(v string) bool { return v == "" || v == "false" || v == "0" || v == "0s" }
