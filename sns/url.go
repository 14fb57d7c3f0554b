package sns

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/pgoutbox/outbox/internal/awsurl"
	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// NewFromURL returns a Publisher configured by a URL, for command-line use:
//
//	sns://?topic_arn=arn:aws:sns:eu-west-1:123456789012:orders.fifo
//
// Query options: topic_arn (required; may be a template, URL-encoded),
// region (default: from topic_arn, else the AWS environment), endpoint (a
// custom endpoint, e.g. LocalStack or a VPC endpoint), max_message_bytes,
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
		return Config{}, errors.New("sns: URL is nil")
	}
	if u.Scheme != "sns" {
		return Config{}, fmt.Errorf("sns: URL %s: scheme must be sns", u.Redacted())
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("sns: URL %s: credentials in the URL are not supported; use the AWS environment or profile", u.Redacted())
	}
	if err := brokerurl.Known("sns", u, "topic_arn", "region", "endpoint", "max_message_bytes", "concurrency"); err != nil {
		return Config{}, err
	}
	q := u.Query()
	cfg := Config{TopicARN: q.Get("topic_arn")}
	if cfg.TopicARN == "" {
		return Config{}, fmt.Errorf("sns: URL %s: topic_arn is required", u.Redacted())
	}
	var err error
	if s := q.Get("max_message_bytes"); s != "" {
		if cfg.MaxMessageBytes, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("sns: URL %s: max_message_bytes: %w", u.Redacted(), err)
		}
	}
	if s := q.Get("concurrency"); s != "" {
		if cfg.Concurrency, err = strconv.Atoi(s); err != nil {
			return Config{}, fmt.Errorf("sns: URL %s: concurrency: %w", u.Redacted(), err)
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		if err := awsurl.CheckEndpoint(endpoint); err != nil {
			return Config{}, fmt.Errorf("sns: URL %s: endpoint: %w", u.Redacted(), err)
		}
	}
	region := q.Get("region")
	if region == "" {
		region = awsurl.Region(cfg.TopicARN, "sns")
	}
	awsCfg, err := awsurl.Load(region)
	if err != nil {
		return Config{}, fmt.Errorf("sns: %w", err)
	}
	cfg.Client = sns.NewFromConfig(awsCfg, func(o *sns.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return cfg, nil
}
