package admin_test

import (
	"os"
	"testing"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestMain gives the examples a DATABASE_URL of their own and stops the
// private servers the tests may have started (testdb.Main).
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
