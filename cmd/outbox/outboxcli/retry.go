package outboxcli

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

func retryCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d         dbOptions
		eventType string
		all       bool
		dryRun    bool
	)
	o := newOptions("retry", "[flags] (ID... | --type TYPE | --all)", `
The manual retry path: resets attempts, retry_after and the dead-letter mark of
the selected events so the relay publishes them again at once, and prints how
many it re-queued.

  outbox retry ID...         these events: dead letters, or pending events
                             waiting for their backoff
  outbox retry --type TYPE   every dead letter of an event type
  outbox retry --all         every dead letter

Events already published are never re-queued. --dry-run counts without
changing anything.`)
	d.register(o)
	o.fs.StringVar(&eventType, "type", "", "re-queue every dead letter of this event type")
	o.fs.BoolVar(&all, "all", false, "re-queue every dead letter")
	o.fs.BoolVar(&dryRun, "dry-run", false, "count the events without re-queuing them")
	o.flagOnly("type", "all", "dry-run")
	return o, func(ctx context.Context, c *cli, o *options) error {
		sel := outbox.RetrySelector{EventType: eventType, All: all, DryRun: dryRun}
		for _, a := range o.args {
			id, err := uuid.Parse(a)
			if err != nil {
				return usageErr("retry: %q is not an event id (want a UUID)", a)
			}
			sel.IDs = append(sel.IDs, id)
		}
		n := 0
		for _, set := range []bool{len(sel.IDs) > 0, eventType != "", all} {
			if set {
				n++
			}
		}
		if n != 1 {
			return usageErr("retry: give event ids, --type TYPE or --all (exactly one of them)")
		}
		admin, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		start := time.Now()
		count, err := admin.Retry(ctx, sel)
		if err != nil {
			return notMigrated(admin.Table(), &d, err)
		}
		verb := "re-queued"
		if dryRun {
			verb = "dry run: would re-queue"
		}
		fmt.Fprintf(c.stdout, "%s %d event(s) in %s", verb, count, admin.Table())
		if len(sel.IDs) > 0 && count < int64(len(sel.IDs)) {
			fmt.Fprintf(c.stdout, " (%d of the %d ids are unknown or already published)", int64(len(sel.IDs))-count, len(sel.IDs))
		}
		fmt.Fprintf(c.stdout, " [%s]\n", time.Since(start).Round(time.Millisecond))
		return nil
	}
}

func cleanupCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d         dbOptions
		retention time.Duration
		batch     int
	)
	o := newOptions("cleanup", "--retention DURATION [flags]", `
Deletes events published more than --retention ago, --cleanup-batch rows per
statement (each its own short transaction), reporting progress. Pending events
and dead letters are never deleted. The relay can do the same continuously
(outbox relay --retention).`)
	d.register(o)
	o.fs.DurationVar(&retention, "retention", 0, "delete events published more than this long ago, e.g. 168h (required)")
	o.fs.IntVar(&batch, "cleanup-batch", outbox.DefaultCleanupBatch, "rows deleted per statement")
	return o, func(ctx context.Context, c *cli, o *options) error {
		switch {
		case len(o.args) > 0:
			return usageErr("cleanup: unexpected argument %q", o.args[0])
		case retention <= 0:
			return o.settingErr("retention", "required: a positive duration such as 168h, got %s", retention)
		case batch < 1:
			return o.settingErr("cleanup-batch", "%d: must be at least 1", batch)
		}
		admin, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		start := time.Now()
		p := c.progress()
		n, err := admin.Cleanup(ctx, retention, batch, func(total int64) {
			p.update(fmt.Sprintf("cleanup: deleted %d so far [%s]", total, time.Since(start).Round(time.Millisecond)))
		})
		p.done()
		if err != nil {
			return notMigrated(admin.Table(), &d, fmt.Errorf("%w (deleted %d before the failure)", err, n))
		}
		fmt.Fprintf(c.stdout, "deleted %d event(s) published more than %s ago from %s [%s]\n",
			n, retention, admin.Table(), time.Since(start).Round(time.Millisecond))
		return nil
	}
}
