package mqtt

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// Query options of a broker URL.
const (
	optTopic           = "topic"
	optClientID        = "client_id"
	optMaxMessageBytes = "max_message_bytes"
	optKeepAlive       = "keepalive"
	optConnectTimeout  = "connect_timeout"
	optTLSCA           = "tls_ca"
	optTLSCert         = "tls_cert"
	optTLSKey          = "tls_key"
)

// ParseURL turns a broker URL, as given to the CLI's --broker, into client
// options and a Config:
//
//	mqtt://user:pass@host:1883?topic=orders/{event_type}
//	mqtts://host1:8883,host2:8883?tls_ca=/etc/mqtt/ca.pem&client_id=relay-1
//
// mqtt:// is plain TCP (port 1883 by default), mqtts:// TLS (port 8883)
// with the system roots or tls_ca; several brokers are comma-separated and
// tried in turn; the user and password are the URL's. Options: topic (the
// Topic template), client_id, max_message_bytes, keepalive and
// connect_timeout (Go durations), tls_ca (a PEM file of private CAs),
// tls_cert and tls_key (a client certificate, PEM). An unknown option is
// an error; errors never contain the password.
func ParseURL(u *url.URL) (*paho.ClientOptions, Config, error) {
	var cfg Config
	opts, err := ClientOptionsFromURL(u, func(name, v string) string {
		switch name {
		case optTopic:
			cfg.Topic = v
		case optMaxMessageBytes:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "want a positive number"
			}
			cfg.MaxMessageBytes = n
		default:
			return "unknown option (want " + strings.Join([]string{optTopic, optClientID, optMaxMessageBytes,
				optKeepAlive, optConnectTimeout, optTLSCA, optTLSCert, optTLSKey}, ", ") + ")"
		}
		return ""
	})
	if err != nil {
		return nil, Config{}, err
	}
	return opts, cfg, nil
}

// ClientOptionsFromURL turns an mqtt:// or mqtts:// URL into paho client
// options: the brokers, the user and password, client_id, keepalive,
// connect_timeout and the TLS files (tls_ca, tls_cert, tls_key). Every
// other query option goes to more, which returns why it refuses it ("" to
// accept); more nil refuses them all. The consumers' side
// (inbox/mqttinbox) reads its URL with it too.
func ClientOptionsFromURL(u *url.URL, more func(name, value string) (why string)) (*paho.ClientOptions, error) {
	if u == nil {
		return nil, errors.New("mqtt: URL is nil")
	}
	secure := u.Scheme == "mqtts"
	if u.Scheme != "mqtt" && !secure {
		return nil, fmt.Errorf("mqtt: URL %s: scheme %q, want mqtt or mqtts", u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("mqtt: URL %s: no broker (want mqtt://host:1883)", u.Redacted())
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, fmt.Errorf("mqtt: URL %s: a path (%q) means nothing here; the topic is the topic option", u.Redacted(), p)
	}
	opts := paho.NewClientOptions()
	port := "1883"
	if secure {
		port = "8883"
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, port)
		}
		if secure {
			opts.AddBroker("ssl://" + h)
		} else {
			opts.AddBroker("tcp://" + h)
		}
	}
	if u.User != nil {
		opts.SetUsername(u.User.Username())
		if pw, ok := u.User.Password(); ok {
			opts.SetPassword(pw)
		}
	}
	var ca, cert, key string
	err := brokerurl.Each("mqtt", u, func(name, v string) string {
		duration := func(set func(time.Duration) *paho.ClientOptions) string {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "want a positive Go duration, e.g. 30s"
			}
			set(d)
			return ""
		}
		switch name {
		case optClientID:
			if v == "" || len(v) > 65535 {
				return "want a client id"
			}
			opts.SetClientID(v)
		case optKeepAlive:
			return duration(opts.SetKeepAlive)
		case optConnectTimeout:
			return duration(opts.SetConnectTimeout)
		case optTLSCA:
			ca = v
		case optTLSCert:
			cert = v
		case optTLSKey:
			key = v
		default:
			if more == nil {
				return "unknown option"
			}
			return more(name, v)
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	if (ca != "" || cert != "" || key != "") && !secure {
		return nil, fmt.Errorf("mqtt: URL %s: TLS files given for mqtt://; use mqtts://", u.Redacted())
	}
	if secure {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if err := brokerurl.AddTLSFiles(tc, ca, cert, key); err != nil {
			return nil, fmt.Errorf("mqtt: URL %s: %w", u.Redacted(), err)
		}
		opts.SetTLSConfig(tc)
	}
	return opts, nil
}

// NewFromURL is New(ParseURL(u)).
func NewFromURL(u *url.URL) (*Publisher, error) {
	opts, cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(opts, cfg)
}
