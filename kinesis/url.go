package kinesis

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	kinesis://?stream=orders&region=eu-west-1
//
// Query options: stream (required: the stream's name or ARN), region
// (default: from stream if an ARN, else the AWS environment), endpoint (a
// custom endpoint, e.g. LocalStack or a VPC endpoint), max_record_bytes,
// concurrency. Credentials come from the AWS default chain (environment,
// shared config and credentials files, SSO, web identity, container or
// instance role), never from the URL: see the package documentation.
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
		return Config{}, errors.New("kinesis: URL is nil")
	}
	if u.Scheme != "kinesis" {
		return Config{}, fmt.Errorf("kinesis: URL %s: scheme must be kinesis", u.Redacted())
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("kinesis: URL %s: credentials in the URL are not supported; use the AWS environment or profile", u.Redacted())
	}
	if u.Host != "" || (u.Path != "" && u.Path != "/") {
		return Config{}, fmt.Errorf("kinesis: URL %s: name the stream with stream=, e.g. kinesis://?stream=orders", u.Redacted())
	}
	if err := brokerurl.Known("kinesis", u, "stream", "region", "endpoint", "max_record_bytes", "concurrency"); err != nil {
		return Config{}, err
	}
	q := u.Query()
	cfg := Config{Stream: q.Get("stream")}
	if cfg.Stream == "" {
		return Config{}, fmt.Errorf("kinesis: URL %s: stream is required", u.Redacted())
	}
	var err error
	if s := q.Get("max_record_bytes"); s != "" {
		if cfg.MaxRecordBytes, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("kinesis: URL %s: max_record_bytes: %w", u.Redacted(), err)
		}
	}
	if s := q.Get("concurrency"); s != "" {
		if cfg.Concurrency, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("kinesis: URL %s: concurrency: %w", u.Redacted(), err)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		if err := awsurl.CheckEndpoint(endpoint); err != nil {
			return Config{}, fmt.Errorf("kinesis: URL %s: endpoint: %w", u.Redacted(), err)
		}
	}
	region := q.Get("region")
	if region == "" {
		region = awsurl.Region(cfg.Stream, "kinesis")
	}
	awsCfg, err := awsurl.Load(region)
	if err != nil {
		return Config{}, fmt.Errorf("kinesis: %w", err)
	}
	cfg.Client = kinesis.NewFromConfig(awsCfg, func(o *kinesis.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return cfg, nil
}
