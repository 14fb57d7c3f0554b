package outboxcli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/admin"
)

// discardJSON is dead-letters discard's --json output.
type discardJSON struct {
	Table string `json:"table"`
	admin.DiscardResult
	DryRun  bool     `json:"dry_run"`
	Skipped []string `json:"skipped_ids,omitempty"` // unknown or not dead letters
}

func discardCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d   dbOptions
		sel selectorFlags
		yes bool
	)
	o := newOptions("dead-letters discard", "[flags] (ID... | --all | --type T | --error-group E | --older-than D)", `
Deletes dead letters for good: the ones nobody will retry. --all deletes
nothing without --yes: it says how many it would delete and exits 2;
--dry-run counts what it would delete. It prints how many dead
letters it deleted and how many events they held back (ordered mode) were
released: those are pending again and the relay publishes them.

  outbox dead-letters discard ID...                these dead letters
  outbox dead-letters discard --type TYPE          every dead letter of a type
  outbox dead-letters discard --error-group ERROR  every dead letter with this
                                                   normalised error
  outbox dead-letters discard --older-than 720h    dead letters created 30
                                                   days ago or more (combines
                                                   with --type, --error-group
                                                   and --all)
  outbox dead-letters discard --all --yes          every dead letter

Only dead letters are deleted: an id that is unknown or not a dead letter is
named on stderr and the command exits 6 after deleting the others.`)
	d.registerAdmin(o)
	sel.register(o, "delete")
	o.fs.BoolVar(&yes, "yes", false, "with --all: confirm deleting every dead letter")
	o.flagOnly("yes")
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
		if s.All && !s.DryRun && !yes {
			dry := admin.DiscardSelector(s)
			dry.DryRun = true
			res, err := adm.Discard(ctx, dry)
			if err != nil {
				return notMigrated(adm.Table(), &d, err)
			}
			return usageErr("dead-letters discard --all would delete %d dead letter(s) from %s for good: add --yes to confirm (nothing was deleted)", res.Discarded, adm.Table())
		}
		if err := sel.checkErrorGroup(ctx, adm); err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		start := time.Now()
		var skipped []uuid.UUID
		if len(s.IDs) > 0 {
			evs, err := adm.Events(ctx, s.IDs...)
			if err != nil {
				return notMigrated(adm.Table(), &d, err)
			}
			var dead []uuid.UUID
			for _, e := range evs {
				if e.State == admin.StateDead {
					dead = append(dead, e.ID)
				}
			}
			skipped = missing(s.IDs, dead)
		}
		res, err := adm.Discard(ctx, admin.DiscardSelector(s))
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if sel.asJSON {
			out := discardJSON{Table: adm.Table(), DiscardResult: res, DryRun: s.DryRun}
			for _, id := range skipped {
				out.Skipped = append(out.Skipped, id.String())
			}
			if err := writeJSON(c, out); err != nil {
				return err
			}
		} else if s.DryRun {
			fmt.Fprintf(c.stdout, "dry run: would discard %d dead letter(s) from %s [%s]\n", res.Discarded, adm.Table(), time.Since(start).Round(time.Millisecond))
		} else {
			fmt.Fprintf(c.stdout, "discarded %d dead letter(s) from %s; released %d event(s) they held back [%s]\n",
				res.Discarded, adm.Table(), res.Released, time.Since(start).Round(time.Millisecond))
		}
		if len(skipped) > 0 {
			return idsNotDone("unknown or not dead letters, not discarded", skipped)
		}
		return nil
	}
}

// printDeadLetterGroups prints dead-letters --group-by.
func printDeadLetterGroups(ctx context.Context, c *cli, adm *admin.Admin, d *dbOptions, groupBy string, asJSON bool) error {
	groups, err := adm.DeadLetterGroups(ctx, groupBy == "error")
	if err != nil {
		return notMigrated(adm.Table(), d, err)
	}
	if asJSON {
		return writeJSON(c, groups)
	}
	if len(groups) == 0 {
		fmt.Fprintf(c.stdout, "no dead letters in %s\n", adm.Table())
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	if groupBy == "type" {
		fmt.Fprint(tw, "EVENT TYPE\t")
	}
	fmt.Fprintln(tw, "COUNT\tFIRST DEAD\tLAST DEAD\tSAMPLE ID\tERROR")
	for _, g := range groups {
		if groupBy == "type" {
			fmt.Fprintf(tw, "%s\t", g.EventType)
		}
		// Whole: it is what --error-group takes (at most 200 characters).
		msg := strings.ReplaceAll(oneLine(g.Error), "\t", " ")
		if g.Error == "" {
			msg = `(none: --error-group "")`
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", g.Count, g.FirstSeen.UTC().Format(time.RFC3339),
			g.LastSeen.UTC().Format(time.RFC3339), g.SampleID, msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, `act on a group with: outbox retry --error-group "ERROR" [--type T], or outbox dead-letters discard --error-group "ERROR" [--type T]`)
	return nil
}

// clipError fits an error on one line of at most width characters for a
// table: a longer one keeps its start and its end, around " … ", because a
// wrapped error ("webhook: POST https://…: 400 Bad Request: <the
// receiver's reason>") says what went wrong last. --json has it whole.
func clipError(s string, width int) string {
	s = strings.ReplaceAll(oneLine(s), "\t", " ") // tabs would break the table's columns
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	head := width / 3
	tail := width - head - 3
	return strings.TrimRight(string(r[:head]), " ") + " … " + strings.TrimLeft(string(r[len(r)-tail:]), " ")
}
