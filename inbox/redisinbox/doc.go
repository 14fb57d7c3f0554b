// Package redisinbox consumes a Redis Stream in a consumer group through an
// inbox: each entry is processed in one database transaction with its
// deduplication record, and acknowledged (XACK) only after that transaction
// committed. Entries a crashed or failing consumer left pending are taken
// over with XAUTOCLAIM.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	_ = redisinbox.EnsureGroup(ctx, client, "order.created", "shipping") // or XGROUP CREATE at deploy time
//	c, _ := redisinbox.New(client, proc, redisinbox.Config{
//		Stream: "order.created", Group: "shipping", Consumer: hostname,
//	})
//	err := c.Run(ctx)
//
// Per entry: committed or already processed (a duplicate) ⇒ XACK; the
// handler or the commit failed ⇒ no XACK, so the entry stays in the group's
// pending list; no usable event id ⇒ XACK and an error log line, since no
// retry can fix it. Run reads new entries (XREADGROUP ... >) and, every
// ClaimInterval, claims entries pending for longer than ClaimIdle, from any
// consumer of the group, itself included (XAUTOCLAIM): that retries failed
// entries and recovers those of a consumer that died between its commit and
// its XACK, which the inbox then reports as duplicates. Keep ClaimIdle above
// the longest a handler takes, or a slow entry is claimed by another consumer
// while it runs (the inbox still runs its handler once: the claim waits on
// the row lock and is skipped as a duplicate).
//
// The entries are read as the redis publisher writes them: the event id and
// the standard headers from the h:-prefixed fields (the id field as a
// fallback), the body from the payload field.
package redisinbox
