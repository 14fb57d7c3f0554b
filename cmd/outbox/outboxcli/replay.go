package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
)

// replayJSON is replay's --json output.
type replayJSON struct {
	Table  string `json:"table"`
	DryRun bool   `json:"dry_run"`
	admin.ReplayResult
	Sample []replaySampleJSON `json:"sample,omitempty"`
}

type replaySampleJSON struct {
	ID            string    `json:"id"`
	Seq           int64     `json:"seq"`
	EventType     string    `json:"event_type"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	CreatedAt     time.Time `json:"created_at"`
}

// replayFlags are replay's flags.
type replayFlags struct {
	d                               dbOptions
	eventType, aggType, aggID, mode string
	since, until                    string
	all, dryRun, asJSON             bool
	rate                            float64
	batch, sample                   int
}

func replayCommand() (*options, func(context.Context, *cli, *options) error) {
	var f replayFlags
	o := newOptions("replay", "--mode same-id|new-id [flags] (ID... | --type T | --aggregate-type T | --aggregate-id A | --since S | --until U | --all)", `
Re-queues delivered events for the running relays to publish again: a copy
of each selected event is inserted at the tail of the outbox table, in the
events' original order. Events are read from the outbox table (published rows
it still keeps) and from its archive (outbox archive). The filters combine.

  outbox replay --mode new-id --type order.created --since 24h
  outbox replay --mode same-id --aggregate-type order --aggregate-id 42
  outbox replay --mode new-id ID...
  outbox replay --mode same-id --all --rate 500

--mode is required:
  same-id  the message id stays the original: a consumer whose inbox already
           processed the event skips it; a new consumer or an emptied inbox
           processes it (a broker that deduplicates by id, JetStream within
           its duplicate window, drops it)
  new-id   a fresh id, with outbox-replay-of: <original id> and
           outbox-replay-id: <replay id> headers: every consumer processes
           it again, on purpose

Ordering: with ordered relays, each aggregate receives what was pending when
the replay ran, then the replayed events in their original order, then the
events written after; they never interleave. Each batch (whole aggregates)
briefly locks the table against inserts (see docs/REPLAY.md).

--dry-run prints how many events would be replayed and the first --sample of
them. An id that is unknown or not delivered yet is named on stderr and the
command exits 6 after replaying the others. The command prints the replay's id; outbox replay list follows it and
outbox replay cancel ID removes its copies not yet delivered.`)
	f.register(o)
	return o, func(ctx context.Context, c *cli, o *options) error { return c.replay(ctx, o, &f) }
}

func (f *replayFlags) register(o *options) {
	f.d.registerAdmin(o)
	o.fs.StringVar(&f.mode, "mode", "", "same-id or new-id (required)")
	o.fs.StringVar(&f.eventType, "type", "", "replay the events of this event type")
	o.fs.StringVar(&f.aggType, "aggregate-type", "", "replay the events of this aggregate type")
	o.fs.StringVar(&f.aggID, "aggregate-id", "", "replay the events of this aggregate id")
	o.fs.StringVar(&f.since, "since", "", "only events written at or after this time: RFC 3339, or a duration ago (24h)")
	o.fs.StringVar(&f.until, "until", "", "only events written before this time: RFC 3339, or a duration ago")
	o.fs.BoolVar(&f.all, "all", false, "replay every delivered event (the filters still apply)")
	o.fs.BoolVar(&f.dryRun, "dry-run", false, "count and print a sample without changing anything")
	o.fs.IntVar(&f.sample, "sample", admin.DefaultReplaySample, "events printed by --dry-run")
	o.fs.Float64Var(&f.rate, "rate", 0, "pace the replay to about this many events per second (0: no pacing)")
	o.fs.IntVar(&f.batch, "replay-batch", admin.DefaultReplayBatch, "copies inserted per transaction (whole aggregates)")
	o.fs.BoolVar(&f.asJSON, "json", false, "print JSON (and no progress lines)")
	o.flagOnly("mode", "type", "aggregate-type", "aggregate-id", "since", "until", "all", "dry-run", "sample", "rate", "json")
}

// selector checks the flags and the id arguments and returns the selector;
// durations in --since and --until count back from now.
func (f *replayFlags) selector(o *options, now time.Time) (admin.ReplaySelector, error) {
	s := admin.ReplaySelector{Mode: admin.ReplayMode(f.mode), EventType: f.eventType, AggregateType: f.aggType,
		AggregateID: f.aggID, All: f.all, DryRun: f.dryRun, Rate: f.rate, BatchSize: f.batch, Sample: f.sample}
	var err error
	if s.IDs, err = eventIDs(o); err != nil {
		return s, err
	}
	if s.Since, s.Until, err = parseRange(f.since, f.until, now); err != nil {
		return s, err
	}
	switch {
	case f.mode == "":
		return s, usageErr("replay: --mode is required: same-id (consumers that processed an event skip it) or new-id (a fresh id: every consumer processes it again)")
	case s.Mode != admin.ReplaySameID && s.Mode != admin.ReplayNewID:
		return s, usageErr("--mode: %q: want same-id or new-id", f.mode)
	case f.rate < 0:
		return s, usageErr("--rate: %g: must not be negative", f.rate)
	case f.batch < 1:
		return s, o.settingErr("replay-batch", "%d: must be at least 1", f.batch)
	case f.sample < 1:
		return s, usageErr("--sample: %d: must be at least 1", f.sample)
	case len(s.IDs) == 0 && !f.all && f.eventType == "" && f.aggType == "" && f.aggID == "" && f.since == "" && f.until == "":
		return s, usageErr("replay: give event ids, --all, or at least one of --type, --aggregate-type, --aggregate-id, --since, --until")
	}
	return s, checkRange(s.Since, s.Until)
}

func (c *cli) replay(ctx context.Context, o *options, f *replayFlags) error {
	now := time.Now()
	s, err := f.selector(o, now)
	if err != nil {
		return err
	}
	adm, done, err := c.adminFor(ctx, o, &f.d)
	if err != nil {
		return err
	}
	defer done()
	skipped, err := replayUnselected(ctx, adm, s)
	if err != nil {
		return notMigrated(adm.Table(), &f.d, err)
	}
	var p *progress
	if !f.asJSON && !f.dryRun {
		p = c.progress()
		s.Progress = func(queued int64) {
			p.update(fmt.Sprintf("replay: queued %d so far [%s]", queued, time.Since(now).Round(time.Millisecond)))
		}
	}
	res, err := adm.Replay(ctx, s)
	if p != nil {
		p.done()
	}
	if err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			return usageErr("%v", err)
		}
		return notMigrated(adm.Table(), &f.d, err)
	}
	if err := f.print(c, adm.Table(), res, now); err != nil {
		return err
	}
	if res.Cancelled && !f.asJSON && !f.dryRun {
		return nil // the cancellation is the news; the ids are not
	}
	return replaySkipped(skipped)
}

// replayUnselected returns the ids of s that select nothing (unknown, or
// not delivered yet): they are named and make the exit code 6, as retry's.
func replayUnselected(ctx context.Context, adm *admin.Admin, s admin.ReplaySelector) ([]uuid.UUID, error) {
	if len(s.IDs) == 0 {
		return nil, nil
	}
	pre := s
	pre.DryRun, pre.Sample = true, len(s.IDs)
	found, err := adm.Replay(ctx, pre)
	if err != nil {
		return nil, err
	}
	var ids []uuid.UUID
	for _, r := range found.Sample {
		ids = append(ids, r.ID)
	}
	return missing(s.IDs, ids), nil
}

// print writes a replay's result: JSON, a dry run's count and sample, or
// the replay's id with what it queued since start.
func (f *replayFlags) print(c *cli, table string, res admin.ReplayResult, start time.Time) error {
	switch {
	case f.asJSON:
		out := replayJSON{Table: table, DryRun: f.dryRun, ReplayResult: res}
		for _, r := range res.Sample {
			out.Sample = append(out.Sample, replaySampleJSON{ID: r.ID.String(), Seq: r.Seq, EventType: r.EventType,
				AggregateType: r.AggregateType, AggregateID: r.AggregateID, CreatedAt: r.CreatedAt})
		}
		return writeJSON(c, out)
	case f.dryRun:
		fmt.Fprintf(c.stdout, "dry run: would replay %d event(s) from %s (mode %s)\n", res.Selected, table, f.mode)
		if len(res.Sample) == 0 {
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSEQ\tEVENT TYPE\tAGGREGATE\tCREATED AT")
		for _, r := range res.Sample {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s/%s\t%s\n", r.ID, r.Seq, r.EventType, r.AggregateType, r.AggregateID,
				r.CreatedAt.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case res.Cancelled:
		fmt.Fprintf(c.stdout, "replay %s cancelled after queuing %d of %d event(s)\n", res.ID, res.Queued, res.Selected)
		return nil
	}
	fmt.Fprintf(c.stdout, "replay %s: queued %d of %d selected event(s) in %s (mode %s)", res.ID, res.Queued, res.Selected, table, f.mode)
	if res.Skipped > 0 {
		fmt.Fprintf(c.stdout, "; skipped %d (a copy already pending, or archived or cleaned up meanwhile)", res.Skipped)
	}
	fmt.Fprintf(c.stdout, " [%s]\nfollow it with: outbox replay list; cancel it with: outbox replay cancel %s\n", time.Since(start).Round(time.Millisecond), res.ID)
	return nil
}

func replaySkipped(ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	return idsNotDone("unknown or not delivered yet, not replayed", ids)
}

func replayListCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d      dbOptions
		limit  int
		asJSON bool
	)
	o := newOptions("replay list", "[flags]", `
Lists the last replays, newest first: their mode, how many events they
selected and queued, how many copies are pending and delivered, and their
state: queuing (outbox replay is still inserting copies), queued (copies
pending), done, cancelled or failed.`)
	d.registerAdmin(o)
	o.fs.IntVar(&limit, "limit", 20, "list at most this many")
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.flagOnly("limit", "json")
	return o, func(ctx context.Context, c *cli, o *options) error {
		switch {
		case len(o.args) > 0:
			return usageErr("replay list: unexpected argument %q", o.args[0])
		case limit < 1:
			return usageErr("--limit: %d: must be at least 1", limit)
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		list, err := adm.ReplayList(ctx, limit)
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if asJSON {
			return writeJSON(c, list)
		}
		if len(list) == 0 {
			fmt.Fprintf(c.stdout, "no replays of %s\n", adm.Table())
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED AT\tMODE\tSTATE\tSELECTED\tQUEUED\tPENDING\tDELIVERED\tCANCELLED\tSELECTOR")
		for _, r := range list {
			state := r.State
			if r.Error != "" {
				state += ": " + oneLine(r.Error)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.CreatedAt.UTC().Format(time.RFC3339), r.Mode, state,
				r.Selected, r.Queued, r.Pending, r.Delivered, r.Cancelled, r.Selector)
		}
		return tw.Flush()
	}
}

func replayCancelCommand() (*options, func(context.Context, *cli, *options) error) {
	var (
		d      dbOptions
		asJSON bool
	)
	o := newOptions("replay cancel", "REPLAY-ID [flags]", `
Cancels a replay: stops its queuing if outbox replay is still running (at its
next batch) and deletes its copies not yet delivered, releasing what they held
back in ordered mode. Copies already delivered stay delivered; the original
events are untouched. A replay that has finished (every copy delivered, none
pending) is left as it is, and the command says so.`)
	d.registerAdmin(o)
	o.fs.BoolVar(&asJSON, "json", false, "print JSON")
	o.flagOnly("json")
	return o, func(ctx context.Context, c *cli, o *options) error {
		if len(o.args) != 1 {
			return usageErr("replay cancel: give exactly one replay id (see outbox replay list)")
		}
		id, err := uuid.Parse(o.args[0])
		if err != nil {
			return usageErr("replay cancel: %q is not a replay id (want a UUID)", o.args[0])
		}
		adm, done, err := c.adminFor(ctx, o, &d)
		if err != nil {
			return err
		}
		defer done()
		res, err := adm.ReplayCancel(ctx, id)
		if errors.Is(err, admin.ErrReplayNotFound) {
			return &exitError{code: ExitNotFound, err: fmt.Errorf("replay cancel: no replay %s in %s (see outbox replay list)", id, adm.Table())}
		}
		if err != nil {
			return notMigrated(adm.Table(), &d, err)
		}
		if asJSON {
			return writeJSON(c, struct {
				Table string `json:"table"`
				ID    string `json:"id"`
				admin.ReplayCancelResult
			}{adm.Table(), id.String(), res})
		}
		if res.AlreadyFinished {
			fmt.Fprintf(c.stdout, "replay %s had already finished (%d copy(ies) delivered, none pending): nothing to cancel, left as it was\n", id, res.Delivered)
			return nil
		}
		fmt.Fprintf(c.stdout, "replay %s cancelled: removed %d copy(ies) not yet delivered (%d already delivered); released %d event(s) they held back\n",
			id, res.Removed, res.Delivered, res.Released)
		return nil
	}
}
