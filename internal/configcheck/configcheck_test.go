package configcheck

import (
	"testing"
	"time"
)

func TestShows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shown string
		v     any
		want  bool
	}{
		{"5m", 5 * time.Minute, true},
		{"100ms", 100 * time.Millisecond, true},
		{"1s", time.Minute, false},
		{"1,000,000", 1_000_000, true},
		{"16 MiB", 16 << 20, true},
		{"1 MiB - 4 KiB", 1<<20 - 4<<10, true},
		{"256 KiB", int32(256 << 10), true},
		{"10 MB", 10_000_000, true},
		{"4000", 400, false},
		{`"pgoutbox"`, "pgoutbox", true},
		{`"pgoutbox"`, "outbox", false},
		{"pgoutbox", "pgoutbox", false}, // a string default is shown quoted
	} {
		if got := shows(tc.shown, tc.v); got != tc.want {
			t.Errorf("shows(%q, %v) = %v, want %v", tc.shown, tc.v, got, tc.want)
		}
	}
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text       string
		named, bad bool
	}{
		{"Defaults to DefaultBatchSize (1000).", true, false},
		{"Defaults to outbox.DefaultTopicTemplate (\"{event_type}\").", true, false},
		{"Default 4000.", false, true},
		{"Defaults to 10s.", false, true},
		{"Default \"{event_type}\".", false, true},
		{"Default -1: the brokers' default.", false, true},
		{"Defaults to 0: no pacing.", false, false},
		{`Defaults to "": Google's service.`, false, false},
		{"Defaults to false.", false, false},
		{"Kafka's default 1000012.", false, false},
	} {
		if got := named.MatchString(tc.text); got != tc.named {
			t.Errorf("named matches %q: %v, want %v", tc.text, got, tc.named)
		}
		if got := bare.MatchString(tc.text); got != tc.bad {
			t.Errorf("bare matches %q: %v, want %v", tc.text, got, tc.bad)
		}
	}
}
