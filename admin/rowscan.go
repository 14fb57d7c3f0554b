package admin

import (
	"fmt"

	"github.com/pgoutbox/outbox/internal/rowval"
)

// headerScanner reads a headers column for the operator's listings as the
// relay reads it (numbers as their text, nulls left out). A value the
// relay cannot read (an array, written by hand) lists with no headers:
// the row's last error says why it is a dead letter.
type headerScanner struct{ dst *map[string]string }

func (h headerScanner) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*h.dst = nil
		return nil
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("headers: unexpected %T", src)
	}
	m, err := rowval.Headers(b)
	if err != nil {
		m = nil
	}
	*h.dst = m
	return nil
}
