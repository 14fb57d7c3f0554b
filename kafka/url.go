package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	kafka://broker1:9092,broker2:9092?topic={event_type}
//
// Query options: topic (topic template), delivery_timeout, request_timeout
// (Go durations), max_message_bytes, client_id, create_topics=true with
// topic_partitions and topic_replication_factor, tls=true (TLS with the
// system roots), tls_ca (a PEM file of private CAs), tls_cert and tls_key
// (a client certificate, PEM), sasl=plain|scram-sha-256|scram-sha-512 with
// the user and password taken from the URL's user info, or the password
// from the environment variable sasl_password_env names (a secret such as
// an Azure Event Hubs connection string stays out of the URL and the process
// list). Setting tls_ca or tls_cert turns TLS on. Errors never repeat the
// password.
//
// Azure Event Hubs, through its Kafka endpoint (port 9093, TLS, SASL PLAIN
// with the user "$ConnectionString" and the namespace's connection string as
// the password):
//
//	kafka://$ConnectionString@NAMESPACE.servicebus.windows.net:9093?tls=true&sasl=plain&sasl_password_env=EVENTHUBS_CONNECTION_STRING
func NewFromURL(u *url.URL) (*Publisher, error) { return NewFromURLEnv(u, os.Getenv) }

// NewFromURLEnv is NewFromURL reading sasl_password_env's variable through
// getenv.
func NewFromURLEnv(u *url.URL, getenv func(string) string) (*Publisher, error) {
	cfg, err := ParseURLEnv(u, getenv)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// ParseURL turns a broker URL into a Config; see NewFromURL for the options.
func ParseURL(u *url.URL) (Config, error) { return ParseURLEnv(u, os.Getenv) }

// ParseURLEnv is ParseURL reading sasl_password_env's variable through
// getenv.
func ParseURLEnv(u *url.URL, getenv func(string) string) (Config, error) {
	if u == nil {
		return Config{}, errors.New("kafka: URL is nil")
	}
	if u.Scheme != "kafka" {
		return Config{}, fmt.Errorf("kafka: URL %s: scheme must be kafka", u.Redacted())
	}
	cfg := Config{}
	for _, b := range strings.Split(u.Host, ",") {
		if b = strings.TrimSpace(b); b != "" {
			if _, _, err := net.SplitHostPort(b); err != nil {
				b = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(b, "["), "]"), "9092") // [::1] too
			}
			host, port, err := net.SplitHostPort(b)
			if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
				return Config{}, fmt.Errorf("kafka: URL %s: broker %q: want host:port, e.g. broker1:9092", u.Redacted(), b)
			}
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if len(cfg.Brokers) == 0 { // no host, or commas alone
		return Config{}, fmt.Errorf("kafka: URL %s: no brokers (want kafka://host:9092,host2:9092)", u.Redacted())
	}
	q := u.Query()
	bad := func(key string, err error) (Config, error) {
		return Config{}, fmt.Errorf("kafka: URL %s: %s=%q: %w", u.Redacted(), key, q.Get(key), err)
	}
	if err := brokerurl.Known("kafka", u, "topic", "delivery_timeout", "request_timeout", "max_message_bytes", "client_id", "tls", "sasl",
		"tls_ca", "tls_cert", "tls_key", "create_topics", "topic_partitions", "topic_replication_factor", "sasl_password_env"); err != nil {
		return Config{}, err
	}
	cfg.Topic = q.Get("topic")
	var err error
	if s := q.Get("delivery_timeout"); s != "" {
		if cfg.DeliveryTimeout, err = time.ParseDuration(s); err != nil {
			return bad("delivery_timeout", err)
		}
	}
	if s := q.Get("request_timeout"); s != "" {
		if cfg.RequestTimeout, err = time.ParseDuration(s); err != nil {
			return bad("request_timeout", err)
		}
	}
	if s := q.Get("max_message_bytes"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return bad("max_message_bytes", err)
		}
		cfg.MaxMessageBytes = int32(n)
	}
	if s := q.Get("create_topics"); s != "" {
		if cfg.CreateTopics, err = strconv.ParseBool(s); err != nil {
			return bad("create_topics", err)
		}
	}
	if s := q.Get("topic_partitions"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return bad("topic_partitions", err)
		}
		cfg.TopicPartitions = int32(n)
	}
	if s := q.Get("topic_replication_factor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 16)
		if err != nil {
			return bad("topic_replication_factor", err)
		}
		cfg.TopicReplicationFactor = int16(n)
	}
	if s := q.Get("client_id"); s != "" {
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.ClientID(s))
	}
	tlsOn := q.Get("tls_ca") != "" || q.Get("tls_cert") != ""
	if s := q.Get("tls"); s != "" {
		on, err := strconv.ParseBool(s)
		if err != nil {
			return bad("tls", err)
		}
		if !on && tlsOn {
			return bad("tls", errors.New("tls_ca or tls_cert given with tls=false"))
		}
		tlsOn = tlsOn || on
	}
	if tlsOn {
		tc, err := tlsConfig(q.Get("tls_ca"), q.Get("tls_cert"), q.Get("tls_key"))
		if err != nil {
			return Config{}, fmt.Errorf("kafka: URL %s: %w", u.Redacted(), err)
		}
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.DialTLSConfig(tc))
	} else if q.Get("tls_key") != "" {
		return bad("tls_key", errors.New("given without tls_cert"))
	}
	if mech := q.Get("sasl"); mech != "" {
		user := u.User.Username()
		pass, inURL := u.User.Password()
		if user == "" {
			return Config{}, fmt.Errorf("kafka: URL %s: sasl=%s needs a user in the URL, and a password there or in sasl_password_env", u.Redacted(), mech)
		}
		if env := q.Get("sasl_password_env"); env != "" {
			if inURL {
				return bad("sasl_password_env", errors.New("the URL has a password too; give it in one place"))
			}
			if getenv == nil {
				getenv = os.Getenv
			}
			if pass = getenv(env); pass == "" {
				return bad("sasl_password_env", fmt.Errorf("the environment variable %s is empty or not set", env))
			}
		} else if !inURL {
			return Config{}, fmt.Errorf("kafka: URL %s: sasl=%s needs a password in the URL or sasl_password_env", u.Redacted(), mech)
		}
		switch strings.ToLower(mech) {
		case "plain":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		case "scram-sha-256":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "scram-sha-512":
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		default:
			return bad("sasl", errors.New("want plain, scram-sha-256 or scram-sha-512"))
		}
	} else if u.User != nil {
		return Config{}, fmt.Errorf("kafka: URL %s: user info given without sasl=", u.Redacted())
	} else if q.Get("sasl_password_env") != "" {
		return bad("sasl_password_env", errors.New("given without sasl="))
	}
	return cfg, nil
}

// tlsConfig builds a client TLS configuration: the system roots, or the PEM
// CAs in caFile; a client certificate when certFile is set.
func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if err := brokerurl.AddTLSFiles(tc, caFile, certFile, keyFile); err != nil {
		return nil, err
	}
	return tc, nil
}
