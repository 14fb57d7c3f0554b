package outboxcli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/admin"
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
	// groupSet: --error-group was given, "" included, which names the
	// group of the dead letters that recorded no error.
	groupSet bool
}

func (s *selectorFlags) register(o *options, verb string) {
	o.fs.StringVar(&s.eventType, "type", "", verb+" the dead letters of this event type")
	o.fs.StringVar(&s.errorGroup, "error-group", "", verb+` the dead letters of this error group, whole, as the ERROR column of outbox dead-letters --group-by error shows it ("" for the dead letters without an error); a group that does not exist is refused`)
	o.fs.DurationVar(&s.olderThan, "older-than", 0, "only dead letters created at least this long ago, e.g. 24h (alone: every such dead letter)")
	o.fs.BoolVar(&s.all, "all", false, verb+" every dead letter")
	o.fs.BoolVar(&s.dryRun, "dry-run", false, "count without changing anything")
	o.fs.BoolVar(&s.asJSON, "json", false, "print JSON")
	o.flagOnly("type", "error-group", "older-than", "all", "dry-run", "json")
}

// selector checks the flags and the id arguments and returns the selector.
func (s *selectorFlags) selector(o *options) (admin.RetrySelector, error) {
	o.fs.Visit(func(f *flag.Flag) { s.groupSet = s.groupSet || f.Name == "error-group" })
	sel := admin.RetrySelector{EventType: s.eventType, ErrorGroup: s.errorGroup, NoError: s.groupSet && s.errorGroup == "",
		OlderThan: s.olderThan, All: s.all, DryRun: s.dryRun}
	var err error
	if sel.IDs, err = eventIDs(o); err != nil {
		return sel, err
	}
	if err := checkOlderThan(s.olderThan); err != nil {
		return sel, err
	}
	filter := s.eventType != "" || s.groupSet || s.olderThan != 0
	switch {
	case len(sel.IDs) > 0 && (filter || s.all):
		return sel, usageErr("%s: event ids cannot be combined with --type, --error-group, --older-than or --all", o.cmd)
	case s.all && (s.eventType != "" || s.groupSet):
		return sel, usageErr("%s: --all cannot be combined with --type or --error-group (--older-than can)", o.cmd)
	case len(sel.IDs) == 0 && !filter && !s.all:
		return sel, usageErr("%s: give event ids, --all, or at least one of --type, --error-group, --older-than", o.cmd)
	}
	return sel, nil
}

// maxGroupsNamed bounds the groups an --error-group refusal lists.
const maxGroupsNamed = 10

// checkErrorGroup refuses an --error-group that names no current group (of
// --type, when given): a group is matched whole, so a prefix or a copy of a
// clipped error would otherwise match nothing and exit 0. The refusal names
// the groups the value could have meant (those it begins, or whose start
// and end it holds around "…"), or else the known groups.
func (s *selectorFlags) checkErrorGroup(ctx context.Context, adm *admin.Admin) error {
	if !s.groupSet {
		return nil
	}
	groups, err := adm.DeadLetterGroups(ctx, s.eventType == "")
	if err != nil {
		return err
	}
	var known, close []string
	for _, g := range groups {
		if s.eventType != "" && g.EventType != s.eventType {
			continue
		}
		if g.Error == s.errorGroup {
			return nil
		}
		known = append(known, g.Error)
		if s.errorGroup != "" && clippedFrom(s.errorGroup, g.Error) {
			close = append(close, g.Error)
		}
	}
	of := ""
	if s.eventType != "" {
		of = fmt.Sprintf(" of type %q", s.eventType)
	}
	what := fmt.Sprintf("--error-group %s: no dead-letter group%s has this error", quoteGroup(s.errorGroup), of)
	switch {
	case len(known) == 0:
		return usageErr("%s: there are no dead letters%s", what, of)
	case len(close) > 0:
		return usageErr("%s (a group is matched whole); it could be %s", what, listGroups(close))
	}
	return usageErr("%s; the groups are %s (outbox dead-letters --group-by error --json prints them whole)", what, listGroups(known))
}

// clippedFrom says whether v reads as group g cut short: a prefix of it, or
// pieces of it around "…" (g's start, its end, what lies between in order).
func clippedFrom(v, g string) bool {
	parts := strings.Split(v, "…")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	if !strings.HasPrefix(g, parts[0]) {
		return false
	}
	rest := g[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(rest, p)
		}
		j := strings.Index(rest, p)
		if j < 0 {
			return false
		}
		rest = rest[j+len(p):]
	}
	return true
}

// quoteGroup quotes a group for an error message; "" is the group of the
// dead letters without an error.
func quoteGroup(g string) string {
	if g == "" {
		return `"" (the dead letters without an error)`
	}
	return fmt.Sprintf("%q", g)
}

func listGroups(gs []string) string {
	q := make([]string, 0, min(len(gs), maxGroupsNamed))
	for _, g := range gs[:min(len(gs), maxGroupsNamed)] {
		q = append(q, quoteGroup(g))
	}
	s := strings.Join(q, ", ")
	if len(gs) > maxGroupsNamed {
		s += fmt.Sprintf(" and %d more", len(gs)-maxGroupsNamed)
	}
	return s
}
