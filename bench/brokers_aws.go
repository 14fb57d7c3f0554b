package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/eventbridge"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/kinesis"
	"github.com/pgoutbox/outbox/sns"
)

// The AWS destinations besides SQS, all against one internal/awsfake in
// the harness process.
const (
	pubSNS         = "sns"
	pubEventBridge = "eventbridge"
	pubKinesis     = "kinesis"
)

// isAWSFake reports a broker that runs against awsfake.
func isAWSFake(pub string) bool {
	return pub == pubSNS || pub == pubEventBridge || pub == pubKinesis
}

// kinesisShards is the shard count of every drain's stream (on-demand
// streams start with 4).
const kinesisShards = 4

// awsBrokers are the harness's clients for awsfake.
type awsBrokers struct {
	fake *awsfake.Server // nil unless started here
	url  string          // endpoint
	sns  *awssns.Client
	eb   *awseventbridge.Client
	kin  *awskinesis.Client
}

var awsBenchCreds = credentials.NewStaticCredentialsProvider("pgoutbox-bench", "pgoutbox-bench", "")

// openAWS starts awsfake (unless a test gave one) and its admin clients,
// once for the three brokers.
func (h *harness) openAWS() {
	b := &h.brokers.aws
	if b.url != "" {
		return
	}
	f := h.opt.awsServer
	if f == nil {
		f = awsfake.Start()
		b.fake = f
	}
	b.url = f.URL()
	b.sns, b.eb, b.kin = newSNSClient(b.url), newEventBridgeClient(b.url), newKinesisClient(b.url)
}

// closeAWS stops awsfake if it was started here.
func (h *harness) closeAWS() {
	if f := h.brokers.aws.fake; f != nil {
		f.Close()
	}
}

func newSNSClient(endpoint string) *awssns.Client {
	return awssns.New(awssns.Options{Region: awsfake.Region, BaseEndpoint: aws.String(endpoint), Credentials: awsBenchCreds})
}

func newEventBridgeClient(endpoint string) *awseventbridge.Client {
	return awseventbridge.New(awseventbridge.Options{Region: awsfake.Region, BaseEndpoint: aws.String(endpoint), Credentials: awsBenchCreds})
}

func newKinesisClient(endpoint string) *awskinesis.Client {
	return awskinesis.New(awskinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(endpoint), Credentials: awsBenchCreds})
}

// awsServer is the fake the counts read: the one started here or the
// test's.
func (h *harness) awsServer() *awsfake.Server {
	if h.opt.awsServer != nil {
		return h.opt.awsServer
	}
	return h.brokers.aws.fake
}

// openAWSDestination creates a drain's topic, event bus or stream named
// name and points spec at it.
func (h *harness) openAWSDestination(ctx context.Context, spec *relaySpec, name string) (*destination, error) {
	b, f := &h.brokers.aws, h.awsServer()
	spec.BrokerURL = b.url
	switch spec.Publisher {
	case pubSNS:
		out, err := b.sns.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String(name)})
		if err != nil {
			return nil, fmt.Errorf("SNS: create topic %s: %w", name, err)
		}
		arn := aws.ToString(out.TopicArn)
		spec.Target = arn
		return &destination{what: "SNS topic " + name,
			count: func(context.Context) (int64, error) { return int64(len(f.Messages(arn))), nil },
			remove: func(ctx context.Context) error {
				_, err := b.sns.DeleteTopic(ctx, &awssns.DeleteTopicInput{TopicArn: aws.String(arn)})
				return err
			}}, nil
	case pubEventBridge:
		if _, err := b.eb.CreateEventBus(ctx, &awseventbridge.CreateEventBusInput{Name: aws.String(name)}); err != nil {
			return nil, fmt.Errorf("EventBridge: create event bus %s: %w", name, err)
		}
		spec.Target = name
		return &destination{what: "EventBridge bus " + name,
			count: func(context.Context) (int64, error) { return int64(len(f.Events(name))), nil },
			remove: func(ctx context.Context) error {
				_, err := b.eb.DeleteEventBus(ctx, &awseventbridge.DeleteEventBusInput{Name: aws.String(name)})
				return err
			}}, nil
	case pubKinesis:
		if _, err := b.kin.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(kinesisShards)}); err != nil {
			return nil, fmt.Errorf("kinesis: create stream %s: %w", name, err)
		}
		spec.Target = name
		return &destination{what: "Kinesis stream " + name,
			count: func(context.Context) (int64, error) { return int64(len(f.Records(name))), nil },
			remove: func(ctx context.Context) error {
				_, err := b.kin.DeleteStream(ctx, &awskinesis.DeleteStreamInput{StreamName: aws.String(name)})
				return err
			}}, nil
	}
	return nil, fmt.Errorf("publisher %q", spec.Publisher)
}

// awsPublisher builds the publisher of an AWS drain in the relay's process.
func awsPublisher(spec relaySpec) (outbox.Publisher, error) {
	switch spec.Publisher {
	case pubSNS:
		return sns.New(sns.Config{Client: newSNSClient(spec.BrokerURL), TopicARN: spec.Target})
	case pubEventBridge:
		return eventbridge.New(eventbridge.Config{Client: newEventBridgeClient(spec.BrokerURL), EventBus: spec.Target})
	case pubKinesis:
		return kinesis.New(kinesis.Config{Client: newKinesisClient(spec.BrokerURL), Stream: spec.Target})
	}
	return nil, fmt.Errorf("publisher %q", spec.Publisher)
}
