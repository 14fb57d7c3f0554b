package nats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
)

// StreamSubjectsFor returns the stream subjects that capture every subject
// the topic template can render: its literal tokens up to the first token
// holding a placeholder, then ">". A placeholder may render dots (event
// types such as "order.created" do), so from there on the subject may have
// any number of tokens, which only a trailing ">" captures:
//
//	orders.{event_type}          -> orders.>
//	nc.cli.{event_type}          -> nc.cli.>
//	orders.{aggregate_id}.events -> orders.>
//	orders.created               -> orders.created
//
// A template whose first token holds a placeholder ("{event_type}") would
// need ">", every subject of the account: that is an error, and the stream
// subjects must be given.
func StreamSubjectsFor(template string) ([]string, error) {
	template = cmp.Or(template, outbox.DefaultTopicTemplate)
	tokens := strings.Split(template, ".")
	for i, tok := range tokens {
		if !strings.Contains(tok, "{") {
			continue
		}
		if i == 0 {
			return nil, fmt.Errorf("subject template %q starts with a placeholder: its subjects cannot be captured without capturing every subject (\">\")", template)
		}
		return []string{strings.Join(tokens[:i], ".") + ".>"}, nil
	}
	return []string{template}, nil
}

// captures says whether the stream subject p captures every subject the
// subject (or wildcard) s matches.
func captures(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, t := range pt {
		if t == ">" {
			return len(st) > i // one token or more, whatever they are
		}
		if i >= len(st) {
			return false
		}
		switch {
		case t == "*":
			if st[i] == ">" {
				return false
			}
		case st[i] != t:
			return false // a literal captures only itself, not a wildcard
		}
	}
	return len(st) == len(pt)
}

// capturedBy returns the name of a stream that captures subject, or "".
// overlaps names the streams whose subjects overlap it without capturing it.
func capturedBy(ctx context.Context, js jetstream.JetStream, subject string) (name string, overlaps []string, err error) {
	l := js.ListStreams(ctx, jetstream.WithStreamListSubject(subject))
	for info := range l.Info() {
		subjects := info.Config.Subjects
		if len(subjects) == 0 {
			subjects = []string{info.Config.Name} // a stream without subjects captures its name
		}
		if slices.ContainsFunc(subjects, func(p string) bool { return captures(p, subject) }) {
			if name == "" {
				name = info.Config.Name
			}
			continue
		}
		overlaps = append(overlaps, fmt.Sprintf("%s %v", info.Config.Name, subjects))
	}
	if err := l.Err(); err != nil {
		return "", nil, err
	}
	return name, overlaps, nil
}

// EnsureStream makes sure subjects are captured by a stream. A subject some
// existing stream, of any name, already captures is left to it. The others
// are added to the stream name (its other settings kept) or, when there is
// no such stream, captured by a new one (file storage, duplicates as its
// dedup window: 0 for the server's default, two minutes). A subject that
// overlaps another stream's subjects without being captured by them cannot
// be added: the error names that stream. It is an explicit, opt-in
// operator action: the publisher calls it only with Config.EnsureStream.
func EnsureStream(ctx context.Context, nc *natsgo.Conn, name string, subjects []string, duplicates time.Duration) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: jetstream: %w", err)
	}
	var missing, overlapping []string
	for _, subj := range subjects {
		by, overlaps, err := capturedBy(ctx, js, subj)
		if err != nil {
			return fmt.Errorf("nats: ensure stream %q: list the streams capturing %q: %w", name, subj, err)
		}
		if by == "" {
			missing = append(missing, subj)
			for _, o := range overlaps {
				overlapping = append(overlapping, fmt.Sprintf("%q overlaps stream %s", subj, o))
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	s, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: missing, Storage: jetstream.FileStorage, Duplicates: duplicates,
		})
	case err == nil:
		cfg := s.CachedInfo().Config
		for _, subj := range missing {
			if !slices.Contains(cfg.Subjects, subj) {
				cfg.Subjects = append(cfg.Subjects, subj)
			}
		}
		_, err = js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		if len(overlapping) > 0 {
			return fmt.Errorf("nats: ensure stream %q: subjects %v: %s, without being captured by it: widen that stream, "+
				"or set the subjects to capture (Config.StreamSubjects, stream_subjects=) so that they do not overlap: %w",
				name, missing, strings.Join(overlapping, "; "), err)
		}
		return fmt.Errorf("nats: ensure stream %q: %w", name, err)
	}
	return nil
}
