// Package awsurl holds what the AWS publishers share: for their broker URLs,
// loading the SDK's default configuration for a region, and checking
// endpoint= and ARNs; and the CloudEvents message attributes of SQS and
// SNS. Only the AWS publisher packages import it, so the SDK stays out of
// every other package's imports.
package awsurl

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Load loads the AWS default configuration (environment, shared config and
// credentials files, SSO, web identity, container or instance role), with
// region if it is not empty. Credentials are resolved lazily, at the first
// request, so an unreachable credential source makes the relay back off
// rather than fail at start.
func Load(region string) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("AWS configuration: %w", err)
	}
	return cfg, nil
}

// CheckEndpoint checks an endpoint= option: an http(s) URL with a host.
func CheckEndpoint(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q: want http(s)://host[:port]", s)
	}
	return nil
}

// ARN is the parts of arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE.
type ARN struct {
	Partition, Service, Region, Account, Resource string
}

// ParseARN splits an ARN of service, or says why it is not one.
func ParseARN(s, service string) (ARN, error) {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] == "" || parts[2] != service || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return ARN{}, fmt.Errorf("%q is not an %s ARN (want arn:aws:%s:REGION:ACCOUNT:...)", s, service, service)
	}
	return ARN{Partition: parts[1], Service: parts[2], Region: parts[3], Account: parts[4], Resource: parts[5]}, nil
}

// Region returns the region of an ARN of service, or "" if s is none.
func Region(s, service string) string {
	a, err := ParseARN(s, service)
	if err != nil {
		return ""
	}
	return a.Region
}
