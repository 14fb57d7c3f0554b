package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// Query options of a broker URL.
const (
	optTopic           = "topic"
	optEmulator        = "emulator"
	optEndpoint        = "endpoint"
	optPublishTimeout  = "publish_timeout"
	optMaxMessageBytes = "max_message_bytes"
	optOrdering        = "ordering"
	optCreateTopics    = "create_topics"
)

// DialConfig says how Dial makes its client.
type DialConfig struct {
	// Project is the Google Cloud project of the topics given as IDs.
	// Required.
	Project string
	// Emulator is the host:port of a Pub/Sub emulator (gcloud beta
	// emulators pubsub, or the Go client's pstest): plain gRPC, no
	// credentials, as PUBSUB_EMULATOR_HOST does. Defaults to "": Google's
	// service.
	Emulator string
	// Endpoint is the host:port of another Pub/Sub endpoint, over TLS with
	// the usual credentials: a regional endpoint
	// (europe-west1-pubsub.googleapis.com:443) or a Private Service Connect
	// address. Defaults to "": pubsub.googleapis.com:443.
	Endpoint string
	// Options are extra client options, applied after the publisher's own.
	Options []option.ClientOption
}

// ParseURL turns a broker URL, as given to the CLI's --broker, into a
// DialConfig and a Config:
//
//	pubsub://PROJECT/{event_type}
//	pubsub://PROJECT?topic=orders-{aggregate_type}&create_topics=true
//	pubsub://test-project/orders?emulator=127.0.0.1:8085
//
// The host is the project; the path, or the topic option (not both), is the
// topic template (an ID or a full projects/P/topics/ID name). Options:
// topic, emulator (host:port of an emulator: no TLS, no credentials),
// endpoint (host:port of another endpoint, TLS), publish_timeout (a Go
// duration), max_message_bytes, ordering=false (Config.DisableOrdering),
// create_topics=true. An unknown option is an error. Credentials come from
// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, the
// gcloud user, the attached service account, workload identity), never from
// the URL.
func ParseURL(u *url.URL) (DialConfig, Config, error) {
	var (
		dc  DialConfig
		cfg Config
	)
	if u == nil {
		return dc, cfg, errors.New("pubsub: URL is nil")
	}
	if u.Scheme != "pubsub" {
		return dc, cfg, fmt.Errorf("pubsub: URL %s: scheme %q, want pubsub", u.Redacted(), u.Scheme)
	}
	if u.User != nil {
		return dc, cfg, fmt.Errorf("pubsub: URL %s: credentials in the URL are not supported; use Application Default Credentials", u.Redacted())
	}
	if u.Host == "" {
		return dc, cfg, fmt.Errorf("pubsub: URL %s: no project (want pubsub://PROJECT/TOPIC)", u.Redacted())
	}
	dc.Project = u.Host
	cfg.Topic = strings.TrimPrefix(u.Path, "/")
	fromPath := cfg.Topic != ""
	hostPort := func(v string) string {
		if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
			return "want host:port"
		}
		return ""
	}
	err := brokerurl.Each("pubsub", u, func(name, v string) string {
		switch name {
		case optTopic:
			if fromPath {
				return "the URL's path names the topic already"
			}
			cfg.Topic = v
		case optEmulator:
			dc.Emulator = v
			return hostPort(v)
		case optEndpoint:
			dc.Endpoint = v
			return hostPort(v)
		case optPublishTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "want a positive Go duration, e.g. 10s"
			}
			cfg.PublishTimeout = d
		case optMaxMessageBytes:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "want a positive number"
			}
			cfg.MaxMessageBytes = n
		case optOrdering:
			on, err := strconv.ParseBool(v)
			if err != nil {
				return "want true or false"
			}
			cfg.DisableOrdering = !on
		case optCreateTopics:
			on, err := strconv.ParseBool(v)
			if err != nil {
				return "want true or false"
			}
			cfg.CreateTopics = on
		default:
			return "unknown option (want " + strings.Join([]string{optTopic, optEmulator, optEndpoint,
				optPublishTimeout, optMaxMessageBytes, optOrdering, optCreateTopics}, ", ") + ")"
		}
		return ""
	})
	if err != nil {
		return DialConfig{}, Config{}, err
	}
	if dc.Emulator != "" && dc.Endpoint != "" {
		return DialConfig{}, Config{}, fmt.Errorf("pubsub: URL %s: emulator and endpoint both set; give one", u.Redacted())
	}
	return dc, cfg, nil
}

// ClientOptions returns the client options dc stands for: the endpoint, or
// the emulator's plain connection without credentials, and a reconnection
// backoff capped at 5s, so that publishing resumes within seconds of an
// outage's end (gRPC's default grows to two minutes).
func (dc DialConfig) ClientOptions() []option.ClientOption {
	opts := []option.ClientOption{option.WithGRPCDialOption(grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
		MinConnectTimeout: 5 * time.Second,
	}))}
	switch {
	case dc.Emulator != "":
		opts = append(opts, option.WithEndpoint(dc.Emulator), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithTelemetryDisabled())
	case dc.Endpoint != "":
		opts = append(opts, option.WithEndpoint(dc.Endpoint))
	}
	return append(opts, dc.Options...)
}

// Dial makes a Pub/Sub client as dc says and returns a Publisher that owns
// it (Close closes it). It sends no request: an unreachable service makes
// publishes fail as unavailable, it does not fail Dial. Missing credentials
// do fail it.
func Dial(ctx context.Context, dc DialConfig, cfg Config) (*Publisher, error) {
	if dc.Project == "" {
		return nil, bad("DialConfig", "Project", "required")
	}
	client, err := gpubsub.NewClient(ctx, dc.Project, dc.ClientOptions()...)
	if err != nil {
		return nil, fmt.Errorf("pubsub: client for project %s: %w", dc.Project, err)
	}
	cfg.Client = client
	p, err := New(cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	p.ownsClient = true
	return p, nil
}

// NewFromURL is Dial(ParseURL(u)).
func NewFromURL(u *url.URL) (*Publisher, error) {
	dc, cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return Dial(context.Background(), dc, cfg)
}
