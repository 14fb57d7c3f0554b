package outboxcli

import (
	"bytes"
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awseventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/awsfake"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestRelayAWSBrokersByScheme drives `outbox relay --broker URL` to SNS,
// EventBridge and Kinesis (internal/awsfake, through endpoint=): the scheme
// picks the publisher, the URL names the destination, every event arrives.
// Not parallel: the AWS SDK reads credentials from the process environment.
func TestRelayAWSBrokersByScheme(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	f := awsfake.Start()
	t.Cleanup(f.Close)
	ctx := testCtx(t)
	creds := credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")
	snsc := awssns.New(awssns.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	topic, err := snsc.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	ebc := awseventbridge.New(awseventbridge.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	if _, err := ebc.CreateEventBus(ctx, &awseventbridge.CreateEventBusInput{Name: aws.String("orders")}); err != nil {
		t.Fatal(err)
	}
	kc := awskinesis.New(awskinesis.Options{Region: awsfake.Region, BaseEndpoint: aws.String(f.URL()), Credentials: creds})
	if _, err := kc.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		scheme string
		query  url.Values
		count  func() int
	}{
		{"sns", url.Values{"topic_arn": {aws.ToString(topic.TopicArn)}}, func() int { return len(f.Messages(aws.ToString(topic.TopicArn))) }},
		{"eventbridge", url.Values{"bus": {"orders"}, "source": {"com.example"}}, func() int { return len(f.Events("orders")) }},
		{"kinesis", url.Values{"stream": {"orders"}}, func() int { return len(f.Records("orders")) }},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			fx := newFixture(t)
			fx.write("order.created", 20)
			tc.query.Set("endpoint", f.URL())
			tc.query.Set("region", awsfake.Region)
			u := url.URL{Scheme: tc.scheme, RawQuery: tc.query.Encode()}
			r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", fx.schema, "--broker", u.String(), "--poll-interval", "10ms")
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := f.Wait(waitCtx, func() bool { return tc.count() >= 20 }); err != nil {
				t.Fatalf("%d of 20 events arrived: %v; stderr:\n%s", tc.count(), err, r.stderr)
			}
			if code := r.stop(t); code != ExitOK {
				t.Fatalf("exit %d: %s", code, r.stderr)
			}
		})
	}
}

// newFixture is setup without t.Parallel, for a test that sets the
// environment.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(testCtx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, schema: schema, pool: pool, writer: w}
}
