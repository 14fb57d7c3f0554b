package outboxtype

import "strings"

// ConfigError is a configuration a constructor rejected. Every constructor
// of this module returns one for a field it refuses: the outbox package's
// (NewRelay, NewWriter, NewNotifier, Migrate and its siblings), package
// admin's, the publishers', the inbox's and its adapters', the console's. Read it
// with errors.As to point at what set the field, as the outbox command does
// with its flags. Package outbox re-exports it as outbox.ConfigError.
type ConfigError struct {
	// Config is the struct, as a user of its package spells it: bare for
	// package outbox ("RelayConfig", "WriterConfig"), qualified by its
	// package elsewhere ("nats.Config", "inbox.Config",
	// "kafkainbox.Config").
	Config string
	// Field is the field, as spelled in Go: "BatchSize", "RetryBackoff",
	// "Table".
	Field string
	// Err is why the value is refused.
	Err error
}

// Error reads "pkg: Type.Field: reason": "outbox: RelayConfig.BatchSize:
// ...", "nats: Config.MaxPending: ...".
func (e *ConfigError) Error() string {
	pkg, typ, ok := strings.Cut(e.Config, ".")
	if !ok {
		pkg, typ = "outbox", e.Config
	}
	return pkg + ": " + typ + "." + e.Field + ": " + e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }
