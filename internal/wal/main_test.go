package wal

import (
	"os"
	"testing"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestMain stops the private logical server testdb.Logical may have started.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
