package outboxcli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// idsNotDone is a partial success: the command did what it could, and these
// ids were left alone. Scripts gate on its exit code.
func idsNotDone(what string, ids []uuid.UUID) error {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return &exitError{code: ExitNotFound, err: fmt.Errorf("%d id(s) %s: %s", len(ids), what, strings.Join(s, " "))}
}

// missing returns the ids of want that are not in have, in want's order.
func missing(want, have []uuid.UUID) []uuid.UUID {
	in := make(map[uuid.UUID]bool, len(have))
	for _, id := range have {
		in[id] = true
	}
	var out []uuid.UUID
	for _, id := range want {
		if !in[id] {
			out = append(out, id)
		}
	}
	return out
}

// retryJSON is retry's --json output.
type retryJSON struct {
	Table    string   `json:"table"`
	DryRun   bool     `json:"dry_run"`
	Requeued int64    `json:"requeued"`
	Skipped  []string `json:"skipped_ids,omitempty"` // unknown or already published
}

func retryCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d   dbOptions
		sel selectorFlags
	)
	o := newOptions("retry", "[flags] (ID... | --all | --type T | --error-group E | --older-than D)", `
The manual retry path: resets attempts, retry_after and the dead-letter mark of
the selected events so the relay publishes them again at once, and prints how
many it re-queued.

  outbox retry ID...                these events: dead letters, or pending
                                    events waiting for their backoff
  outbox retry --type TYPE          every dead letter of an event type
  outbox retry --error-group ERROR  every dead letter with this normalised
                                    error (see dead-letters --group-by error)
  outbox retry --older-than 24h     every dead letter created a day ago or
                                    more (combines with --type, --error-group
                                    and --all)
  outbox retry --all                every dead letter

Events already published are never re-queued: an id that is unknown or
already published is named on stderr and the command exits 6 after
re-queuing the others. --dry-run counts without changing anything.`)
	d.registerAdmin(o)
	sel.register(o, "re-queue")
	return o, func(ctx context.Context, c *cli, o *options) error {
		s, err := sel.selector(o)
		if err != nil {
			return err
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		if err := sel.checkErrorGroup(ctx, adm); err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		start := time.Now()
		var skipped []uuid.UUID
		if len(s.IDs) > 0 {
			found, err := adm.Unprocessed(ctx, s.IDs)
			if err != nil {
				return notMigrated(adm.Table(), &d, err)
			}
			skipped = missing(s.IDs, found)
		}
		count, err := adm.Retry(ctx, s)
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if sel.asJSON {
			out := retryJSON{Table: adm.Table(), DryRun: s.DryRun, Requeued: count}
			for _, id := range skipped {
				out.Skipped = append(out.Skipped, id.String())
			}
			if err := writeJSON(c, out); err != nil {
				return err
			}
		} else {
			verb := "re-queued"
			if s.DryRun {
				verb = "dry run: would re-queue"
			}
			fmt.Fprintf(c.stdout, "%s %d event(s) in %s [%s]\n", verb, count, adm.Table(), time.Since(start).Round(time.Millisecond))
		}
		if len(skipped) > 0 {
			return idsNotDone("unknown or already published, not re-queued", skipped)
		}
		return nil
	}
}

// cleanupJSON is cleanup's --json output.
type cleanupJSON struct {
	Table            string  `json:"table"`
	DryRun           bool    `json:"dry_run,omitempty"`
	WouldDelete      int64   `json:"would_delete,omitempty"`
	Deleted          int64   `json:"deleted"`
	RetentionSeconds float64 `json:"retention_seconds"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
}

func cleanupCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d         dbOptions
		retention time.Duration
		batch     int
		asJSON    bool
		dryRun    bool
	)
	o := newOptions("cleanup", "--retention DURATION [flags]", `
Deletes events published more than --retention ago, --cleanup-batch rows per
statement (each its own short transaction), reporting progress. Pending events
and dead letters are never deleted. --dry-run counts what would be deleted and
deletes nothing. The relay can do the same continuously (outbox relay
--retention). Durations: 90s, 15m, 168h, or days: 7d.`)
	d.registerAdmin(o)
	o.fs.DurationVar(&retention, "retention", 0, "delete events published more than this long ago, e.g. 168h (required)")
	o.fs.IntVar(&batch, "cleanup-batch", outbox.DefaultCleanupBatch, "rows deleted per statement")
	o.fs.BoolVar(&asJSON, "json", false, "print JSON (and no progress lines)")
	o.fs.BoolVar(&dryRun, "dry-run", false, "count the events that would be deleted, and delete nothing")
	o.flagOnly("json", "dry-run")
	return o, func(ctx context.Context, c *cli, o *options) error {
		switch {
		case len(o.args) > 0:
			return usageErr("cleanup: unexpected argument %q", o.args[0])
		case retention <= 0:
			return o.settingErr("retention", "required: a positive duration such as 168h, got %s", retention)
		case batch < 1:
			return o.settingErr("cleanup-batch", "%d: must be at least 1", batch)
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		if dryRun {
			n, err := adm.PublishedBefore(ctx, retention)
			if err != nil {
				return notMigrated(adm.Table(), &d, err)
			}
			if asJSON {
				return writeJSON(c, cleanupJSON{Table: adm.Table(), DryRun: true, WouldDelete: n, RetentionSeconds: retention.Seconds()})
			}
			fmt.Fprintf(c.stdout, "dry run: would delete %d event(s) published more than %s ago from %s; nothing was deleted\n", n, retention, adm.Table())
			return nil
		}
		start := time.Now()
		n, err := c.withProgress(asJSON, "cleanup: deleted", func(report func(int64)) (int64, error) {
			return adm.Cleanup(ctx, retention, batch, report)
		})
		if err != nil {
			return notMigrated(adm.Table(), &d, fmt.Errorf("%w (deleted %d before the failure)", err, n))
		}
		if asJSON {
			return writeJSON(c, cleanupJSON{Table: adm.Table(), Deleted: n,
				RetentionSeconds: retention.Seconds(), ElapsedSeconds: time.Since(start).Seconds()})
		}
		fmt.Fprintf(c.stdout, "deleted %d event(s) published more than %s ago from %s [%s]\n",
			n, retention, adm.Table(), time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// withProgress runs a batched operation (cleanup, archive), printing
// "<what> N so far [elapsed]" as it reports progress, unless the output is
// JSON.
func (c *cli) withProgress(asJSON bool, what string, run func(report func(int64)) (int64, error)) (int64, error) {
	if asJSON {
		return run(nil)
	}
	start := time.Now()
	p := c.progress()
	defer p.done()
	return run(func(total int64) {
		p.update(fmt.Sprintf("%s %d so far [%s]", what, total, time.Since(start).Round(time.Millisecond)))
	})
}
