package outboxcli

import (
	"context"
	"fmt"
	"time"

	"github.com/pgoutbox/outbox/admin"
)

// archiveJSON is archive's --json output.
type archiveJSON struct {
	Table            string  `json:"table"`
	DryRun           bool    `json:"dry_run,omitempty"`
	WouldMove        int64   `json:"would_move,omitempty"`
	Moved            int64   `json:"moved"`
	OlderThanSeconds float64 `json:"older_than_seconds"`
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
}

func archiveCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d         dbOptions
		olderThan time.Duration
		batch     int
		asJSON    bool
		dryRun    bool
	)
	o := newOptions("archive", "--older-than DURATION [flags]", `
Moves events published more than --older-than ago from the outbox table to its
archive table (<table>_archive), --archive-batch rows per statement (each its
own short transaction: a row is always in exactly one of the two tables),
reporting progress. Pending events and dead letters are never moved. Archived
events stay available to outbox replay. pgoutbox never deletes from the
archive: drop, truncate or delete from it as your retention policy says.
--dry-run counts what would be moved and moves nothing. Durations: 90s, 15m,
168h, or days: 7d.`)
	d.registerAdmin(o)
	o.fs.DurationVar(&olderThan, "older-than", 0, "move events published more than this long ago, e.g. 168h (required)")
	o.fs.IntVar(&batch, "archive-batch", admin.DefaultArchiveBatch, "rows moved per statement")
	o.fs.BoolVar(&asJSON, "json", false, "print JSON (and no progress lines)")
	o.fs.BoolVar(&dryRun, "dry-run", false, "count the events that would be moved, and move nothing")
	o.flagOnly("older-than", "json", "dry-run")
	return o, func(ctx context.Context, c *cli, o *options) error {
		switch {
		case len(o.args) > 0:
			return usageErr("archive: unexpected argument %q", o.args[0])
		case olderThan <= 0:
			return usageErr("--older-than: required: a positive duration such as 168h, got %s", olderThan)
		case batch < 1:
			return o.settingErr("archive-batch", "%d: must be at least 1", batch)
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		if dryRun {
			n, err := adm.PublishedBefore(ctx, olderThan)
			if err != nil {
				return notMigrated(adm.Table(), &d, err)
			}
			if asJSON {
				return writeJSON(c, archiveJSON{Table: adm.Table(), DryRun: true, WouldMove: n, OlderThanSeconds: olderThan.Seconds()})
			}
			fmt.Fprintf(c.stdout, "dry run: would archive %d event(s) published more than %s ago from %s; nothing was moved\n", n, olderThan, adm.Table())
			return nil
		}
		start := time.Now()
		n, err := c.withProgress(asJSON, "archive: moved", func(report func(int64)) (int64, error) {
			return adm.Archive(ctx, olderThan, batch, report)
		})
		if err != nil {
			return notMigrated(adm.Table(), &d, fmt.Errorf("%w (moved %d before the failure)", err, n))
		}
		if asJSON {
			return writeJSON(c, archiveJSON{Table: adm.Table(), Moved: n,
				OlderThanSeconds: olderThan.Seconds(), ElapsedSeconds: time.Since(start).Seconds()})
		}
		fmt.Fprintf(c.stdout, "archived %d event(s) published more than %s ago from %s [%s]\n",
			n, olderThan, adm.Table(), time.Since(start).Round(time.Millisecond))
		return nil
	}
}
