// Package kafkainbox consumes Kafka records through an inbox with franz-go:
// each record is processed in one database transaction with its
// deduplication record, and the consumer group's offsets are committed only
// after those transactions committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	cl, _ := kgo.NewClient(
//		kgo.SeedBrokers("127.0.0.1:9092"),
//		kgo.ConsumerGroup("shipping"),
//		kgo.ConsumeTopics("order.created"),
//		kgo.DisableAutoCommit(),   // required: Run commits
//		kgo.BlockRebalanceOnPoll(), // recommended: no rebalance mid-batch
//	)
//	defer cl.CloseAllowingRebalance()
//	c, _ := kafkainbox.New(proc, kafkainbox.Config{})
//	err := c.Run(ctx, cl)
//
// Kafka has no per-record acknowledgement: a consumer group's committed
// offset says "everything before this is done". So Run polls a batch,
// processes its records in order, and commits the batch's offsets
// (CommitRecords) only after every record was processed. A handler error
// does not skip the record: Run retries it, with exponential backoff, until
// it succeeds or ctx is cancelled; the partition waits meanwhile, which keeps
// each aggregate's events in order (the kafka publisher keys records by
// aggregate id). A consumer that dies after an inbox commit and before the
// offset commit gets the records again from the last committed offset (or
// another group member does); the inbox reports them as duplicates and the
// handler does not run again.
//
// A record without a usable event id (outbox-event-id header) can never be
// processed: it is logged at error level and skipped, and its offset is
// committed with the others.
package kafkainbox
