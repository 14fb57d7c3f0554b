package outboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// adminFor connects and returns an Admin on d's table.
func (c *cli) adminFor(ctx context.Context, o *options, d *dbOptions) (*admin.Admin, func(), error) {
	adm, _, done, err := c.adminPoolFor(ctx, o, d)
	return adm, done, err
}

// adminPoolFor is adminFor, also returning the pool, for a command that
// reads more than the Admin does.
func (c *cli) adminPoolFor(ctx context.Context, o *options, d *dbOptions) (*admin.Admin, *pgxpool.Pool, func(), error) {
	if d.timeout != nil {
		if err := d.timeout.check(o); err != nil {
			return nil, nil, nil, err
		}
	}
	pool, err := c.openDB(ctx, o, d)
	if err != nil {
		return nil, nil, nil, err
	}
	adm, err := admin.New(pool, admin.Config{Schema: d.Schema, Table: d.Table, StatementTimeout: d.StatementTimeout})
	if err != nil {
		closePool(pool)
		return nil, nil, nil, flagError(err)
	}
	return adm, pool, func() { closePool(pool) }, nil
}

func statusCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d      dbOptions
		asJSON bool
	)
	o := newOptions("status", "[flags]", `
Prints the outbox's state: events pending and the age of the oldest, dead
letters, events published in the last minute and hour; in total and per event
type; replayed events (outbox replay) pending and delivered, apart. When the
table's WAL source slot exists (outbox migrate --source wal), a "source"
section shows it: the relay streaming it (walsender pid), wal_status, the lag
(WAL written since the slot's confirmed position) and the WAL it retains on
the server's disk. --json prints the same for scripts (ages in seconds, sizes
in bytes).`)
	d.registerAdmin(o)
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.flagOnly("json")
	return o, func(ctx context.Context, c *cli, o *options) error {
		if len(o.args) > 0 {
			return usageErr("status: unexpected argument %q", o.args[0])
		}
		adm, pool, done, err := c.adminPoolFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		st, err := adm.Status(ctx)
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		slot, err := readSlot(ctx, pool, &d)
		if err != nil {
			return err
		}
		// Replayed copies are counted apart; a table not yet migrated to
		// version 5 has none, and status still works on it.
		var replayed *admin.ReplayTotals
		if rt, err := adm.ReplayTotals(ctx); err == nil {
			replayed = &rt
		} else if !errors.Is(err, outbox.ErrNotMigrated) {
			return err
		}
		if asJSON {
			return writeJSON(c, struct {
				Table string `json:"table"`
				*admin.Status
				Replayed *admin.ReplayTotals `json:"replayed,omitempty"`
				Source   *slotStatus         `json:"source,omitempty"`
			}{adm.Table(), st, replayed, slot})
		}
		w := c.stdout
		fmt.Fprintf(w, "outbox %s\n", adm.Table())
		fmt.Fprintf(w, "  pending           %d (oldest %s)\n", st.Pending, age(st.OldestPendingAge))
		if st.Scheduled > 0 && st.NextDue != nil {
			fmt.Fprintf(w, "  scheduled         %d event(s), next due %s\n", st.Scheduled, st.NextDue.Local().Format(time.RFC3339))
		}
		fmt.Fprintf(w, "  dead letters      %d\n", st.DeadLetters)
		if st.Held > 0 {
			fmt.Fprintf(w, "  held              %d event(s) parked behind an earlier failing event of their aggregate (ordered mode)\n", st.Held)
		}
		if st.BlockedAggregates > 0 {
			fmt.Fprintf(w, "  blocked           %d aggregate(s) with later events behind a dead letter (held back in ordered mode)\n", st.BlockedAggregates)
		}
		fmt.Fprintf(w, "  published         %d in the last minute, %d in the last hour\n", st.PublishedLastMinute, st.PublishedLastHour)
		if replayed != nil && replayed.Pending+replayed.Delivered > 0 {
			fmt.Fprintf(w, "  replayed          %d pending (counted in pending), %d delivered and kept; %d replay(s) in progress (outbox replay list)\n",
				replayed.Pending, replayed.Delivered, replayed.Active)
		}
		if slot != nil {
			slot.print(w)
		}
		if wt := st.Waiting; wt != nil {
			cause := "the database shows no cause: the relays' /readyz and logs say why (a destination refusing everything, failing batches), or no relay runs"
			if len(wt.Causes) > 0 {
				cause = strings.Join(wt.Causes, "; ")
			}
			fmt.Fprintf(w, "  STUCK?            %d event(s) due, the oldest for %s: %s\n", wt.Due, age(wt.OldestDueAge), cause)
		}
		if len(st.ByType) == 0 {
			return nil
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "EVENT TYPE\tPENDING\tOLDEST PENDING\tDEAD LETTERS\tPUBLISHED 1M\tPUBLISHED 1H\n")
		for _, t := range st.ByType {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", t.EventType, t.Pending, age(t.OldestPendingAge),
				t.DeadLetters, t.PublishedLastMinute, t.PublishedLastHour)
		}
		return tw.Flush()
	}
}

// age formats a duration for people: "-" for none, milliseconds below a
// second, tenths of a second below a minute, seconds above.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// deadLetterJSON is one dead letter in --json output. The payload and
// headers are present only with --show-payload.
type deadLetterJSON struct {
	ID            string            `json:"id"`
	Seq           int64             `json:"seq"`
	EventType     string            `json:"event_type"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"last_error"`
	CreatedAt     time.Time         `json:"created_at"`
	DeadAt        *time.Time        `json:"dead_at"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
}

// maxErrorWidth bounds the last error in the text table (clipError keeps
// its start and end); --json has it whole.
const maxErrorWidth = 160

func deadLettersCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d           dbOptions
		eventType   string
		olderThan   time.Duration
		limit       int
		asJSON      bool
		showPayload bool
		groupBy     string
	)
	o := newOptions("dead-letters", "[flags]", `
Lists dead letters, oldest first: events that failed permanently or --max-attempts
times and that the relay no longer tries. Payloads are never printed unless
--show-payload is given: they may hold personal data. Re-queue dead letters
with outbox retry; delete the ones nobody will retry with outbox dead-letters
discard (see outbox dead-letters discard --help).

--group-by error counts dead letters per normalised error (numbers and ids
replaced by <n> and <id>), the largest groups first; --group-by type per event
type and error. A group's error is what retry and discard take as
--error-group.`)
	d.registerAdmin(o)
	o.fs.StringVar(&eventType, "type", "", "only dead letters of this event type")
	o.fs.DurationVar(&olderThan, "older-than", 0, "only events created at least this long ago")
	o.fs.IntVar(&limit, "limit", 100, "list at most this many")
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.fs.BoolVar(&showPayload, "show-payload", false, "include payloads and headers")
	o.fs.StringVar(&groupBy, "group-by", "", "count dead letters per error, or per type (event type and error), instead of listing them")
	o.flagOnly("type", "older-than", "limit", "json", "show-payload", "group-by")
	return o, func(ctx context.Context, c *cli, o *options) error {
		switch {
		case len(o.args) > 0:
			return usageErr("dead-letters: unexpected argument %q", o.args[0])
		case limit < 1:
			return usageErr("--limit: %d: must be at least 1", limit)
		case olderThan < 0:
			return usageErr("--older-than: %s: must not be negative", olderThan)
		case groupBy != "" && groupBy != "error" && groupBy != "type":
			return usageErr("--group-by: %q: want error or type", groupBy)
		case groupBy != "" && (eventType != "" || olderThan != 0 || showPayload):
			return usageErr("--group-by cannot be combined with --type, --older-than or --show-payload")
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		if groupBy != "" {
			return printDeadLetterGroups(ctx, c, adm, &d, groupBy, asJSON)
		}
		recs, err := adm.DeadLetters(ctx, admin.DeadLetterFilter{EventType: eventType, OlderThan: olderThan, Limit: limit})
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if len(recs) == limit {
			fmt.Fprintf(c.stderr, "outbox: showing the first %d dead letters; raise --limit for more\n", limit)
		}
		if asJSON {
			out := make([]deadLetterJSON, len(recs))
			for i, r := range recs {
				out[i] = deadLetterJSON{ID: r.ID.String(), Seq: r.Seq, EventType: r.EventType,
					AggregateType: r.AggregateType, AggregateID: r.AggregateID, Attempts: r.Attempts,
					LastError: r.LastError, CreatedAt: r.CreatedAt, DeadAt: r.DeadAt}
				if showPayload {
					out[i].Payload, out[i].Headers = r.Payload, r.Headers
				}
			}
			return writeJSON(c, out)
		}
		if len(recs) == 0 {
			fmt.Fprintf(c.stdout, "no dead letters in %s\n", adm.Table())
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		header := "ID\tEVENT TYPE\tAGGREGATE\tATTEMPTS\tCREATED AT\tLAST ERROR"
		if showPayload {
			header += "\tPAYLOAD"
		}
		fmt.Fprintln(tw, header)
		for _, r := range recs {
			lastErr := clipError(r.LastError, maxErrorWidth)
			fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%d\t%s\t%s", r.ID, r.EventType, r.AggregateType, r.AggregateID,
				r.Attempts, r.CreatedAt.UTC().Format(time.RFC3339), lastErr)
			if showPayload {
				fmt.Fprintf(tw, "\t%s", r.Payload)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%d dead letter(s); re-queue with: outbox retry <id>... | --type T | --all; delete with: outbox dead-letters discard <id>... | --type T | --all\n", len(recs))
		return nil
	}
}
