package httpinbox_test

import (
	"os"
	"testing"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestMain gives the example a DATABASE_URL of its own (testdb.Main).
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
