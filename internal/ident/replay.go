package ident

import "strings"

// The objects of replay and archiving (migration 5) are derived here as
// methods rather than Names fields, so the migration templates can call them
// and a derived name too long for PostgreSQL fails the migration with a clear
// error instead of being truncated by the server. Their suffixes are no
// longer than "_aggregate_idx", so every table name New accepts fits.

// QArchive is the archive table, "schema"."<table>_archive": processed rows
// moved out of the outbox table.
func (n Names) QArchive() (string, error) { return n.qualified("archive table", n.Table+"_archive") }

// QReplays is the replays table, "schema"."<base>_replays" (base is the table
// name without "_events"): one row per replay.
func (n Names) QReplays() (string, error) {
	return n.qualified("replays table", strings.TrimSuffix(n.Table, "_events")+"_replays")
}

// QCancels is the cancellations table, "schema"."<base>_cancels"
// (migration 9): the WAL position of the last cancel, which a WAL relay
// reads before it publishes rows committed before it.
func (n Names) QCancels() (string, error) {
	return n.qualified("cancellations table", strings.TrimSuffix(n.Table, "_events")+"_cancels")
}

// ReplayIndex is the outbox table's index of replayed rows, unqualified.
func (n Names) ReplayIndex() (string, error) { return n.local("replay index", n.Table+"_replay_idx") }

// ArchiveIDIndex and ArchiveReplayIndex are the archive table's indexes by
// event id and by replay, unqualified.
func (n Names) ArchiveIDIndex() (string, error) {
	return n.local("archive id index", n.Table+"_arch_id_idx")
}

// ArchiveReplayIndex is the archive table's index by replay: see
// ArchiveIDIndex.
func (n Names) ArchiveReplayIndex() (string, error) {
	return n.local("archive replay index", n.Table+"_arch_rep_idx")
}

func (n Names) local(what, name string) (string, error) {
	if len(name) > MaxLen {
		return "", fieldErr("table", "%q is too long: the derived %s name %q exceeds %d bytes", n.Table, what, name, MaxLen)
	}
	return Quote(name), nil
}

func (n Names) qualified(what, name string) (string, error) {
	q, err := n.local(what, name)
	if err != nil || n.Schema == "" {
		return q, err
	}
	return Quote(n.Schema) + "." + q, nil
}
