package outboxcli

import "log/slog"

// durationsAsText is the relay logger's slog.HandlerOptions.ReplaceAttr: a
// time.Duration attribute is written as Go spells it ("1m56.87s"), not as
// the nanosecond integer slog's JSON handler writes, which no reader takes
// for a duration. Being in the handler, it covers every attribute, the
// library's included.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
