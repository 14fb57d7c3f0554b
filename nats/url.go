package nats

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	natsgo "github.com/nats-io/nats.go"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// Query options of a broker URL; they are removed before the URL is handed
// to nats.go.
const (
	optSubject        = "subject"
	optMaxPending     = "max_pending"
	optEnsureStream   = "ensure_stream"
	optStreamSubjects = "stream_subjects"
	optCreds          = "creds"
	optNKey           = "nkey"
	optCA             = "ca"
	optCert           = "cert"
	optKey            = "key"
	optName           = "name"
)

// DialConfig says how Dial connects.
type DialConfig struct {
	// URL is the server URL as nats.go takes it: nats:// or tls://,
	// user:password@ or a token@ included, several servers separated by
	// commas. Required.
	URL string
	// CredsFile is a .creds file (a user JWT and its nkey seed), the usual
	// credential of a NATS account set up with nsc.
	CredsFile string
	// NKeyFile is a file holding a user nkey seed (SU...), for servers
	// configured with nkey users.
	NKeyFile string
	// CAFile is a PEM file of the certificate authorities that signed the
	// server's certificate, when it is not in the system's roots. Setting
	// it (or CertFile) makes the connection TLS.
	CAFile string
	// CertFile and KeyFile are the client certificate and key in PEM, for
	// servers that verify clients (tls { verify: true }). Both or neither.
	CertFile, KeyFile string
	// Name is the connection name shown by the server's monitoring.
	// Defaults to DefaultName ("pgoutbox").
	Name string
	// Logger receives connection events (connected, disconnected, why an
	// attempt failed). Defaults to discarding them.
	Logger *slog.Logger
	// Options are extra nats.go options, applied after the publisher's own.
	Options []natsgo.Option
}

// ParseURL turns a broker URL, as given to the CLI's --broker, into a
// DialConfig and a Config:
//
//	nats://user:pass@host:4222?subject=orders.{event_type}
//	tls://host:4222?creds=/etc/nats/outbox.creds&ca=/etc/nats/ca.pem&ensure_stream=ORDERS
//
// Options: subject (the Subject template), max_pending, ensure_stream,
// stream_subjects (comma-separated), creds (a .creds file), nkey (an nkey
// seed file), ca (a PEM CA file), cert and key (a client certificate), name
// (the connection name). An unknown option is an error. Errors never
// contain the URL's password.
func ParseURL(u *url.URL) (DialConfig, Config, error) {
	var (
		dc  DialConfig
		cfg Config
	)
	if u == nil {
		return dc, cfg, errors.New("nats: URL is nil")
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return dc, cfg, fmt.Errorf("nats: URL %s: scheme %q, want nats or tls", u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return dc, cfg, fmt.Errorf("nats: URL %s: missing host, e.g. nats://127.0.0.1:4222", u.Redacted())
	}
	err := brokerurl.Each("nats", u, func(name, v string) string {
		switch name {
		case optSubject:
			cfg.Subject = v
		case optMaxPending:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "want a positive number"
			}
			cfg.MaxPending = n
		case optEnsureStream:
			cfg.EnsureStream = v
		case optStreamSubjects:
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.StreamSubjects = append(cfg.StreamSubjects, s)
				}
			}
		case optCreds:
			dc.CredsFile = v
		case optNKey:
			dc.NKeyFile = v
		case optCA:
			dc.CAFile = v
		case optCert:
			dc.CertFile = v
		case optKey:
			dc.KeyFile = v
		case optName:
			dc.Name = v
		default:
			return "unknown option (want " + strings.Join([]string{optSubject, optMaxPending, optEnsureStream,
				optStreamSubjects, optCreds, optNKey, optCA, optCert, optKey, optName}, ", ") + ")"
		}
		return ""
	})
	if err != nil {
		return DialConfig{}, Config{}, err
	}
	clean := *u
	clean.RawQuery = ""
	clean.ForceQuery = false
	dc.URL = clean.String()
	return dc, cfg, nil
}

// connectOptions turns dc into nats.go options, checking the credential
// files exist (a typo should fail at start, not as an endless outage).
func (dc DialConfig) connectOptions() ([]natsgo.Option, error) {
	var opts []natsgo.Option
	if dc.CredsFile != "" && dc.NKeyFile != "" {
		return nil, bad("DialConfig", "NKeyFile", "CredsFile and NKeyFile both set; a .creds file already holds the seed")
	}
	if (dc.CertFile == "") != (dc.KeyFile == "") {
		return nil, bad("DialConfig", "KeyFile", "CertFile and KeyFile go together")
	}
	for field, path := range map[string]string{"CredsFile": dc.CredsFile, "NKeyFile": dc.NKeyFile, "CAFile": dc.CAFile,
		"CertFile": dc.CertFile, "KeyFile": dc.KeyFile} {
		if path == "" {
			continue
		}
		if err := brokerurl.Readable(path); err != nil {
			return nil, bad("DialConfig", field, "%w", err)
		}
	}
	if dc.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(dc.CredsFile))
	}
	if dc.NKeyFile != "" {
		o, err := natsgo.NkeyOptionFromSeed(dc.NKeyFile)
		if err != nil {
			return nil, bad("DialConfig", "NKeyFile", "%w", err)
		}
		opts = append(opts, o)
	}
	if dc.CAFile != "" {
		opts = append(opts, natsgo.RootCAs(dc.CAFile))
	}
	if dc.CertFile != "" {
		opts = append(opts, natsgo.ClientCert(dc.CertFile, dc.KeyFile))
	}
	return opts, nil
}

// Dial connects to NATS as dc says and returns a Publisher that owns the
// connection (Close closes it). It does not wait for the server: the
// connection retries forever in the background, publishes fail as
// unavailable meanwhile, and Health reports it.
func Dial(dc DialConfig, cfg Config) (*Publisher, error) {
	if dc.URL == "" {
		return nil, bad("DialConfig", "URL", "required")
	}
	redacted, password := dc.URL, ""
	if u, err := url.Parse(dc.URL); err == nil {
		redacted = u.Redacted()
		password, _ = u.User.Password()
	}
	credOpts, err := dc.connectOptions()
	if err != nil {
		return nil, err
	}
	dc.Name = cmp.Or(dc.Name, DefaultName)
	log := cmp.Or(dc.Logger, slog.New(slog.DiscardHandler)).With("broker", redacted)
	// Say why a connection attempt fails (an untrusted certificate, refused
	// credentials), once per distinct reason, so an operator is not left
	// with "broker unavailable" alone.
	var lastReason atomic.Value
	logReason := func(err error) {
		if err == nil {
			return
		}
		msg := err.Error()
		if password != "" {
			msg = strings.ReplaceAll(msg, password, "xxxxx")
		}
		if prev, _ := lastReason.Swap(msg).(string); prev != msg {
			log.Warn("nats connection attempt failed", "err", msg)
		}
	}
	opts := []natsgo.Option{
		natsgo.ReconnectErrHandler(func(_ *natsgo.Conn, err error) { logReason(err) }),
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) { logReason(err) }),
		natsgo.Name(dc.Name),
		natsgo.MaxReconnects(-1),
		natsgo.RetryOnFailedConnect(true),
		natsgo.ConnectHandler(func(*natsgo.Conn) { lastReason.Store(""); log.Info("nats connected") }),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		natsgo.ReconnectHandler(func(*natsgo.Conn) { lastReason.Store(""); log.Info("nats reconnected") }),
	}
	opts = append(opts, credOpts...)
	opts = append(opts, dc.Options...)
	nc, err := natsgo.Connect(dc.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", redacted, err)
	}
	p, err := New(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// NewFromURL is Dial(ParseURL(u)).
func NewFromURL(u *url.URL) (*Publisher, error) {
	dc, cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Dial(dc, cfg)
}
