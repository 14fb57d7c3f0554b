package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	sqs://?queue_url=https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo
//
// Query options: queue_url (required; may be a template, URL-encoded),
// region (default: from queue_url's host, else the AWS environment),
// endpoint (a custom endpoint, e.g. LocalStack or a VPC endpoint),
// max_message_bytes, concurrency, create_queues (true: Config.CreateQueues).
// Credentials come from the AWS default
// chain (environment, shared config and credentials files, SSO, web
// identity, container or instance role), never from the URL: see the
// package documentation.
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
		return Config{}, errors.New("sqs: URL is nil")
	}
	if u.Scheme != "sqs" {
		return Config{}, fmt.Errorf("sqs: URL %s: scheme must be sqs", u.Redacted())
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("sqs: URL %s: credentials in the URL are not supported; use the AWS environment or profile", u.Redacted())
	}
	if err := brokerurl.Known("sqs", u, "queue_url", "region", "endpoint", "max_message_bytes", "concurrency", "create_queues"); err != nil {
		return Config{}, err
	}
	q := u.Query()
	cfg := Config{QueueURL: q.Get("queue_url")}
	if cfg.QueueURL == "" {
		return Config{}, fmt.Errorf("sqs: URL %s: queue_url is required", u.Redacted())
	}
	var err error
	if s := q.Get("max_message_bytes"); s != "" {
		if cfg.MaxMessageBytes, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("sqs: URL %s: max_message_bytes: %w", u.Redacted(), err)
		}
	}
	if s := q.Get("concurrency"); s != "" {
		if cfg.Concurrency, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("sqs: URL %s: concurrency: %w", u.Redacted(), err)
		}
	}
	if s := q.Get("create_queues"); s != "" {
		if cfg.CreateQueues, err = strconv.ParseBool(s); err != nil {
			return Config{}, fmt.Errorf("sqs: URL %s: create_queues: %w", u.Redacted(), err)
		}
	}
	region := q.Get("region")
	if region == "" {
		region = regionOf(cfg.QueueURL)
	}
	var loadOpts []func(*awsconfig.LoadOptions) error
	if region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(region))
	}
	// Loading reads the environment and config files; credentials are
	// resolved lazily, at the first request.
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), loadOpts...)
	if err != nil {
		return Config{}, fmt.Errorf("sqs: AWS configuration: %w", err)
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		if err := checkEndpoint(endpoint); err != nil {
			return Config{}, fmt.Errorf("sqs: URL %s: endpoint: %w", u.Redacted(), err)
		}
	}
	cfg.Client = sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return cfg, nil
}

func checkEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q: want http(s)://host[:port]", s)
	}
	return nil
}

// regionOf returns REGION from https://sqs.REGION.amazonaws.com/..., or "".
func regionOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	parts := strings.Split(u.Hostname(), ".")
	if len(parts) >= 4 && parts[0] == "sqs" && parts[2] == "amazonaws" {
		return parts[1]
	}
	return ""
}
