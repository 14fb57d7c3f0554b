package eventbridge

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	eventbridge://?bus=orders&source=com.example.orders&region=eu-west-1
//
// Query options: bus (the event bus's name or ARN; default "default"),
// source (a template; default "outbox.{aggregate_type}"), region (default:
// from bus if an ARN, else the AWS environment), endpoint (a custom
// endpoint, e.g. LocalStack or a VPC endpoint), concurrency, skip_bus_check
// (true: Config.SkipBusCheck). Credentials come from the AWS default chain
// (environment, shared config and credentials files, SSO, web identity,
// container or instance role), never from the URL: see the package
// documentation.
func NewFromURL(u *url.URL) (*Publisher, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// ParseURL turns a broker URL into a Config, its Client made from the AWS
// default configuration; see NewFromURL for the options.
func ParseURL(u *url.URL) (Config, error) {
	if u == nil {
		return Config{}, errors.New("eventbridge: URL is nil")
	}
	if u.Scheme != "eventbridge" {
		return Config{}, fmt.Errorf("eventbridge: URL %s: scheme must be eventbridge", u.Redacted())
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("eventbridge: URL %s: credentials in the URL are not supported; use the AWS environment or profile", u.Redacted())
	}
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return Config{}, fmt.Errorf("eventbridge: URL %s: name the bus with bus=, e.g. eventbridge://?bus=orders", u.Redacted())
	}
	if err := brokerurl.Known("eventbridge", u, "bus", "source", "region", "endpoint", "concurrency", "skip_bus_check"); err != nil {
		return Config{}, err
	}
	q := u.Query()
	cfg := Config{EventBus: q.Get("bus"), Source: q.Get("source")}
	var err error
	if s := q.Get("concurrency"); s != "" {
		if cfg.Concurrency, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("eventbridge: URL %s: concurrency: %w", u.Redacted(), err)
		}
	}
	if s := q.Get("skip_bus_check"); s != "" {
		if cfg.SkipBusCheck, err = strconv.ParseBool(s); err != nil {
			return Config{}, fmt.Errorf("eventbridge: URL %s: skip_bus_check: %w", u.Redacted(), err)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		if err := awsurl.CheckEndpoint(endpoint); err != nil {
			return Config{}, fmt.Errorf("eventbridge: URL %s: endpoint: %w", u.Redacted(), err)
		}
	}
	region := q.Get("region")
	if region == "" {
		region = awsurl.Region(cfg.EventBus, "events")
	}
	awsCfg, err := awsurl.Load(region)
	if err != nil {
		return Config{}, fmt.Errorf("eventbridge: %w", err)
	}
	cfg.Client = eventbridge.NewFromConfig(awsCfg, func(o *eventbridge.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return cfg, nil
}
