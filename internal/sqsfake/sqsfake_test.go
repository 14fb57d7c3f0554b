package sqsfake_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/pgoutbox/outbox/internal/sqsfake"
)

func client(f *sqsfake.Server) *sqs.Client {
	return sqs.New(sqs.Options{
		Region: sqsfake.Region, BaseEndpoint: aws.String(f.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
	})
}

func count(ctx context.Context, t *testing.T, c *sqs.Client, qurl string) (visible, inFlight int) {
	t.Helper()
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(qurl),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	visible, err1 := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, err2 := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("attributes %v: %v", out.Attributes, err)
	}
	return visible, inFlight
}

// TestQueueLifecycle: what the benchmark relies on, through the real SDK:
// the message counts follow sends, receives and deletes, and DeleteQueue
// removes the queue.
func TestQueueLifecycle(t *testing.T) {
	t.Parallel()
	f := sqsfake.Start()
	t.Cleanup(f.Close)
	c := client(f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	qurl := aws.ToString(q.QueueUrl)
	if got := f.Queues(); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("Queues() = %v, want [orders]", got)
	}
	var entries []types.SendMessageBatchRequestEntry
	for i := range 10 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprintf(`{"i":%d}`, i))})
	}
	for range 3 {
		out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(qurl), Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			t.Fatalf("SendMessageBatch: %v, failed %v", err, out.Failed)
		}
	}
	if n := f.SendCalls(); n != 3 {
		t.Errorf("SendCalls() = %d, want 3", n)
	}
	if v, fl := count(ctx, t, c, qurl); v != 30 || fl != 0 {
		t.Errorf("after 30 sends: %d visible, %d in flight; want 30, 0", v, fl)
	}
	rcv, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(qurl), MaxNumberOfMessages: 4, VisibilityTimeout: 60})
	if err != nil || len(rcv.Messages) != 4 {
		t.Fatalf("ReceiveMessage: %d messages, %v", len(rcv.Messages), err)
	}
	if v, fl := count(ctx, t, c, qurl); v != 26 || fl != 4 {
		t.Errorf("after receiving 4: %d visible, %d in flight; want 26, 4", v, fl)
	}
	var del []types.DeleteMessageBatchRequestEntry
	for i, m := range rcv.Messages {
		del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
	}
	if out, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(qurl), Entries: del}); err != nil || len(out.Failed) > 0 {
		t.Fatalf("DeleteMessageBatch: %v, failed %v", err, out.Failed)
	}
	if v, fl := count(ctx, t, c, qurl); v != 26 || fl != 0 {
		t.Errorf("after deleting the 4: %d visible, %d in flight; want 26, 0", v, fl)
	}

	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(qurl)}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	if got := f.Queues(); len(got) != 0 {
		t.Errorf("Queues() after DeleteQueue = %v, want none", got)
	}
	var missing *types.QueueDoesNotExist
	if _, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(qurl)}); !errors.As(err, &missing) {
		t.Errorf("GetQueueAttributes of the deleted queue: %v, want QueueDoesNotExist", err)
	}
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(qurl)}); !errors.As(err, &missing) {
		t.Errorf("DeleteQueue again: %v, want QueueDoesNotExist", err)
	}
	f.Close()
	f.Close() // idempotent
}

// TestDeleteQueueEndsLongPolls: a receive waiting on an empty queue returns
// QueueDoesNotExist when the queue is deleted, not at the end of its wait.
func TestDeleteQueueEndsLongPolls(t *testing.T) {
	t.Parallel()
	f := sqsfake.Start()
	t.Cleanup(f.Close)
	c := client(f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("idle")})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 20})
		polled <- err
	}()
	start := time.Now()
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}); err != nil {
		t.Fatalf("DeleteQueue: %v", err)
	}
	var missing *types.QueueDoesNotExist
	if err := <-polled; !errors.As(err, &missing) {
		t.Errorf("the long poll returned %v, want QueueDoesNotExist", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the long poll ended %s after DeleteQueue: it waited out its 20s", d.Round(time.Second))
	}
}
