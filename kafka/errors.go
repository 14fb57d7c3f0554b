package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox"
)

// classifyRecords wraps each failure with its class and the record's topic.
func classifyRecords(errs []error, topics []string) []error {
	for i, err := range errs {
		if err == nil || errors.Is(err, outbox.ErrPermanent) {
			continue
		}
		errs[i] = classify(fmt.Errorf("kafka: produce to topic %q: %w", topics[i], err), topics[i])
	}
	return errs
}

// permanentErrs are broker answers about the record itself, which retrying
// cannot fix.
var permanentErrs = []error{
	kerr.MessageTooLarge,       // larger than max.message.bytes
	kerr.RecordListTooLarge,    // batch larger than the broker accepts
	kerr.InvalidTopicException, // illegal topic name
	kerr.InvalidRecord,         // the broker's record validation (e.g. a compacted topic)
	kerr.PolicyViolation,       //
}

// refusesAll are answers meaning the cluster refuses every record for a
// reason of its own: credentials, permissions, too few in-sync replicas, a
// leader moving, a failing disk, a quota. They fail every event alike, so
// they are outages: counting attempts would dead-letter the whole table over
// a revoked ACL or a broker being restarted.
var refusesAll = []error{
	kerr.TopicAuthorizationFailed,           // no WRITE ACL on the topic
	kerr.ClusterAuthorizationFailed,         // no IDEMPOTENT_WRITE on the cluster
	kerr.TransactionalIDAuthorizationFailed, //
	kerr.SaslAuthenticationFailed,           // wrong or expired credentials
	kerr.IllegalSaslState,                   //
	kerr.UnsupportedSaslMechanism,           //
	kerr.NotEnoughReplicas,                  // fewer in-sync replicas than min.insync.replicas
	kerr.NotEnoughReplicasAfterAppend,       //
	kerr.NotLeaderForPartition,              // a leader election is under way
	kerr.LeaderNotAvailable,                 //
	kerr.BrokerNotAvailable,                 //
	kerr.RequestTimedOut,                    //
	kerr.KafkaStorageError,                  // the partition's log directory is offline
	kerr.ThrottlingQuotaExceeded,            //
}

// classify wraps err, a record's failure, with the relay's class. topic is
// named in the errors an operator has to act on.
func classify(err error, topic string) error {
	for _, pe := range permanentErrs {
		if errors.Is(err, pe) {
			return outbox.Permanent(err)
		}
	}
	for _, re := range refusesAll {
		if errors.Is(err, re) {
			return outbox.Unavailable(err)
		}
	}
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// Every record for that topic would fail: the destination is
		// missing, not the record wrong.
		return outbox.Unavailable(MissingTopicError{Topic: topic, Err: err})
	case errors.Is(err, kgo.ErrClientClosed):
		// The publisher was closed: nothing to retry against, but the
		// message is not at fault either.
		return outbox.Unavailable(err)
	case isTLSError(err):
		return outbox.Unavailable(err)
	case outbox.Classify(err) == outbox.ClassUnavailable:
		return outbox.Unavailable(err) // dial errors, refused, reset, DNS
	case errors.Is(err, kgo.ErrRecordTimeout), outbox.NoAnswer(err):
		// The record got no verdict from its partition's leader in time.
		// Kafka reports what is wrong with a record explicitly (the
		// permanent errors above), so a record that merely could not get
		// through is an availability problem even when other partitions'
		// records were acknowledged: a leader being moved, a cluster
		// coming back after an outage. Counting an attempt for it would
		// dead-letter healthy events during a long partial outage.
		return outbox.Unavailable(err)
	}
	return err
}

// MissingTopicError is the error of a record produced to a topic the cluster
// does not have (UNKNOWN_TOPIC_OR_PARTITION once the client's metadata
// retries are spent). It is classified unavailable: the relay keeps the
// events and backs off until an operator creates the topic, or the
// publisher does (Config.CreateTopics).
type MissingTopicError struct {
	Topic string
	Err   error
}

func (e MissingTopicError) Error() string {
	return fmt.Sprintf("%v: topic %q does not exist; create it, e.g. `kafka-topics.sh --bootstrap-server BROKER:9092 "+
		"--create --topic %s --partitions 6 --replication-factor 3`, or let the publisher do it "+
		"(create_topics=true in the broker URL, Config.CreateTopics)", e.Err, e.Topic, e.Topic)
}

func (e MissingTopicError) Unwrap() error { return e.Err }

func isTLSError(err error) bool {
	var (
		rec  tls.RecordHeaderError
		cert *tls.CertificateVerificationError
		alrt tls.AlertError
	)
	return errors.As(err, &rec) || errors.As(err, &cert) || errors.As(err, &alrt)
}
