package outboxcli

import (
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// The selection of events is parsed here, once, for every command that takes
// one: dead-letters (--type, --older-than), retry and dead-letters discard
// (ids, --type, --error-group, --older-than, --all), cancel (ids), replay
// (ids, --since, --until).

// eventIDs parses the command's positional arguments as event ids.
func eventIDs(o *options) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	for _, a := range o.args {
		id, err := uuid.Parse(a)
		if err != nil {
			return nil, usageErr("%s: %q is not an event id (want a UUID)", o.cmd, a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// checkOlderThan refuses a negative --older-than.
func checkOlderThan(d time.Duration) error {
	if d < 0 {
		return usageErr("--older-than: %s: must not be negative", d)
	}
	return nil
}

// parseWhen reads --since/--until: an RFC 3339 time, or a duration meaning
// that long ago.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErr("--%s: %q: want an RFC 3339 time (2026-03-01T12:00:00Z) or a duration ago (24h)", flag, s)
}

// parseRange reads --since and --until.
func parseRange(since, until string, now time.Time) (from, to time.Time, err error) {
	if from, err = parseWhen("since", since, now); err != nil {
		return
	}
	to, err = parseWhen("until", until, now)
	return
}

// checkRange refuses an --until that is not after --since.
func checkRange(from, to time.Time) error {
	if !from.IsZero() && !to.IsZero() && !to.After(from) {
		return usageErr("--until %s is not after --since %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return nil
}

// selectorFlags are the flags that choose dead letters for retry and
// dead-letters discard.
type selectorFlags struct {
	eventType  string
	errorGroup string
	olderThan  time.Duration
	all        bool
	dryRun     bool
	asJSON     bool
}

func (s *selectorFlags) register(o *options, verb string) {
	o.fs.StringVar(&s.eventType, "type", "", verb+" the dead letters of this event type")
	o.fs.StringVar(&s.errorGroup, "error-group", "", verb+" the dead letters whose normalised error is this (the ERROR column of outbox dead-letters --group-by error)")
	o.fs.DurationVar(&s.olderThan, "older-than", 0, "only dead letters created at least this long ago, e.g. 24h (alone: every such dead letter)")
	o.fs.BoolVar(&s.all, "all", false, verb+" every dead letter")
	o.fs.BoolVar(&s.dryRun, "dry-run", false, "count without changing anything")
	o.fs.BoolVar(&s.asJSON, "json", false, "print JSON")
	o.flagOnly("type", "error-group", "older-than", "all", "dry-run", "json")
}

// selector checks the flags and the id arguments and returns the selector.
func (s *selectorFlags) selector(o *options) (outbox.RetrySelector, error) {
	sel := outbox.RetrySelector{EventType: s.eventType, ErrorGroup: s.errorGroup, OlderThan: s.olderThan, All: s.all, DryRun: s.dryRun}
	var err error
	if sel.IDs, err = eventIDs(o); err != nil {
		return sel, err
	}
	if err := checkOlderThan(s.olderThan); err != nil {
		return sel, err
	}
	filter := s.eventType != "" || s.errorGroup != "" || s.olderThan != 0
	switch {
	case len(sel.IDs) > 0 && (filter || s.all):
		return sel, usageErr("%s: event ids cannot be combined with --type, --error-group, --older-than or --all", o.cmd)
	case s.all && (s.eventType != "" || s.errorGroup != ""):
		return sel, usageErr("%s: --all cannot be combined with --type or --error-group (--older-than can)", o.cmd)
	case len(sel.IDs) == 0 && !filter && !s.all:
		return sel, usageErr("%s: give event ids, --all, or at least one of --type, --error-group, --older-than", o.cmd)
	}
	return sel, nil
}
