package nats

import "testing"

func TestCaptures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"nc.>", "nc.cli.>", true},
		{"nc.>", "nc.cli.order.created", true},
		{"nc.cli.>", "nc.>", false},
		{"nc.cli.>", "nc.wal.>", false},
		{">", "anything.at.all", true},
		{"a.*", "a.b", true},
		{"a.*", "a.*", true},
		{"a.*", "a.>", false},
		{"a.*", "a.b.c", false},
		{"a.*.c", "a.*.c", true},
		{"a.b", "a.*", false},
		{"a.b", "a.b", true},
		{"a.b", "a", false},
		{"a.>", "a", false},
		{"*.>", "a.b.>", true},
	} {
		if got := captures(tc.p, tc.s); got != tc.want {
			t.Errorf("captures(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
}
