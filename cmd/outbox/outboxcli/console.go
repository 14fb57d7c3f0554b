package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/console"
)

// DefaultConsoleAddr is where `outbox console` listens: loopback, so the
// console is not exposed by accident.
const DefaultConsoleAddr = "127.0.0.1:8080"

// consolePrefix is where `outbox relay --console` mounts the console on its
// HTTP server, beside /metrics.
const consolePrefix = "/console/"

// consoleFlags are the console's settings, shared by `outbox console` and
// `outbox relay --console`.
type consoleFlags struct {
	enabled      bool // relay only
	token        string
	hidePayloads bool
	readOnly     bool
}

func (f *consoleFlags) register(o *options) {
	o.fs.StringVar(&f.token, "console-token", "", "token(s) allowing the console's actions: a secret, or name:secret pairs separated by commas (empty: read-only)")
	o.fs.BoolVar(&f.hidePayloads, "console-hide-payloads", false, "never show payloads in the console")
	o.fs.BoolVar(&f.readOnly, "console-read-only", false, "no actions in the console, even with a token")
}

// registerRelay adds --console and the console's settings to the relay's
// flags.
func (f *consoleFlags) registerRelay(o *options) {
	o.fs.BoolVar(&f.enabled, "console", false, "serve the operator console at /console/ on --http-addr")
	f.register(o)
}

// config validates the flags and returns the console's configuration.
func (f *consoleFlags) config(o *options, d *dbOptions, log *slog.Logger) (console.Config, error) {
	tokens, err := console.ParseTokens(f.token)
	if err != nil {
		return console.Config{}, o.settingErr("console-token", "%v", err)
	}
	for name, secret := range tokens {
		if len(secret) < console.MinTokenLength {
			return console.Config{}, o.settingErr("console-token", "token %q is %d bytes, want at least %d", name, len(secret), console.MinTokenLength)
		}
	}
	return console.Config{Schema: d.Schema, Table: d.Table, Tokens: tokens, ReadOnly: f.readOnly,
		HidePayloads: f.hidePayloads, Logger: log}, nil
}

// validateRelay checks the relay's console flags: the console needs the
// HTTP server. The console's other settings are ignored without --console,
// so one environment can serve both commands.
func (f *consoleFlags) validateRelay(httpAddr string) error {
	if f.enabled && httpAddr == "" {
		return usageErr("--console: needs --http-addr (e.g. --http-addr 127.0.0.1:9090)")
	}
	return nil
}

// warnIfExposed warns when a console without a token listens beyond
// loopback: anyone who reaches addr then reads every event, payloads
// included unless hidden, since a token is what payloads are shown behind.
// It warns rather than refuses: in a container the console must listen on
// every interface, behind the platform's own authenticating proxy.
func warnIfExposed(log *slog.Logger, addr string, cfg console.Config) {
	if len(cfg.Tokens) > 0 || loopback(addr) {
		return
	}
	shown := "every event, payloads included,"
	if cfg.HidePayloads {
		shown = "every event (payloads hidden),"
	}
	log.Warn("the console has no token and listens beyond loopback: "+shown+" is shown to anyone who reaches it; "+
		"set --console-token, listen on 127.0.0.1, or put an authenticating proxy in front", "addr", addr)
}

// loopback says whether addr (host:port) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// mountConsole mounts the console at /console/ on the relay's HTTP server
// when --console is set; the overview then shows the relay's state.
func (c *cli) mountConsole(srv *http.Server, o *options, f *consoleFlags, s *relaySettings, pool *pgxpool.Pool, relay *outbox.Relay, broker string, log *slog.Logger) error {
	if !f.enabled {
		return nil
	}
	mux, ok := srv.Handler.(*http.ServeMux)
	if !ok {
		return errors.New("--console: the HTTP server has no ServeMux")
	}
	cfg, err := f.config(o, &s.db, log)
	if err != nil {
		return err
	}
	cfg.Prefix = consolePrefix
	source := tableName(s.db)
	cfg.Relay = func(ctx context.Context) console.RelayState {
		st := console.RelayState{Source: source, Broker: broker, Workers: s.cfg.Workers, BatchSize: s.cfg.BatchSize, Ordered: s.cfg.Ordered}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := relay.Ready(rctx); err != nil {
			st.Ready = errors.New(c.red.String(oneLine(err.Error())))
			st.BrokerDown = strings.HasPrefix(err.Error(), "broker")
		}
		return st
	}
	h, err := console.New(pool, cfg)
	if err != nil {
		return flagError(err)
	}
	mux.Handle(consolePrefix, h)
	mux.Handle("GET /console", http.RedirectHandler(consolePrefix, http.StatusMovedPermanently))
	warnIfExposed(log, s.httpAddr, cfg)
	log.Info("serving the operator console", "path", consolePrefix, "actions", len(cfg.Tokens) > 0 && !cfg.ReadOnly,
		"hide_payloads", cfg.HidePayloads)
	return nil
}

func consoleCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d         dbOptions
		f         consoleFlags
		httpAddr  string
		logLevel  string
		logFormat string
	)
	o := newOptions("console", "[flags]", `
Serves the operator console: the outbox's state (pending, oldest pending age,
published per minute over the last hour, dead letters, held events and
blocked aggregates, per event type), dead letters grouped by event type and
error with their retry and discard actions, an event's detail, an aggregate's
timeline, search by event id or aggregate id.

The console is read-only unless --console-token is set: the actions then need
the token, as "Authorization: Bearer <token>" or through the sign-in form.
Each action is logged (token name, action, selector, count). Payloads are
shown only on request, to a signed-in user when a token is set, and never
with --console-hide-payloads. It listens on 127.0.0.1 by default: put it
behind your own authenticating proxy (with TLS) before exposing it; on
another address without a token it warns, since it then shows every payload
to anyone who reaches it. Wrong tokens are throttled (429).

To serve the console from the relay instead, run outbox relay --console.`)
	d.register(o)
	o.fs.StringVar(&httpAddr, "http-addr", DefaultConsoleAddr, "address to serve the console on")
	f.register(o)
	o.fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	o.fs.StringVar(&logFormat, "log-format", "", "json or text (default: text when stderr is a terminal, else json)")
	return o, func(ctx context.Context, c *cli, o *options) error {
		if len(o.args) > 0 {
			return usageErr("console: unexpected argument %q", o.args[0])
		}
		if _, _, err := net.SplitHostPort(httpAddr); err != nil {
			return o.settingErr("http-addr", "%q: %v (want host:port, e.g. %s)", httpAddr, err, DefaultConsoleAddr)
		}
		log, err := c.newLogger(o, logLevel, logFormat)
		if err != nil {
			return err
		}
		cfg, err := f.config(o, &d, log)
		if err != nil {
			return err
		}
		pcfg, err := c.poolConfig(o, &d, 4)
		if err != nil {
			return err
		}
		pool, err := c.connect(ctx, pcfg)
		if err != nil {
			return err
		}
		defer closePool(pool)
		adm, err := admin.New(pool, admin.Config{Schema: d.Schema, Table: d.Table})
		if err != nil {
			return flagError(err)
		}
		// A missing table is reported now, with its exit code, rather than
		// on every page.
		if _, err := adm.DeadLetters(ctx, admin.DeadLetterFilter{Limit: 1}); err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		h, err := console.New(pool, cfg)
		if err != nil {
			return flagError(err)
		}
		ln, err := net.Listen("tcp", httpAddr)
		if err != nil {
			return o.settingErr("http-addr", "%v", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		mode := "read-only"
		if len(cfg.Tokens) > 0 && !cfg.ReadOnly {
			mode = "actions need a token"
		}
		fmt.Fprintf(c.stdout, "outbox console for %s on http://%s/ (%s)\n", adm.Table(), ln.Addr(), mode)
		warnIfExposed(log, httpAddr, cfg)
		select {
		case err := <-served:
			return fmt.Errorf("console: %w", err)
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}
