package testdb

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Main runs a test binary's tests and examples, as a package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }
//
// Before m.Run it creates a schema of the run's own on the shared test
// database and sets DATABASE_URL to the database with that schema as
// search_path, so Example functions read DATABASE_URL as a user's program
// would, without touching a real database or each other's packages. After,
// it drops the schema and stops the private servers tests started (Logical,
// TLS, ClockBehind).
func Main(m *testing.M) int {
	schema := NewSchemaName("examples")
	dsn, err := examplesURL(schema)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testdb: no DATABASE_URL for the examples: %v\n", err)
	} else {
		os.Setenv("DATABASE_URL", dsn)
	}
	code := m.Run()
	if err == nil && os.Getenv("TESTDB_KEEP") == "" {
		if err := execShared("DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: drop the examples' schema %s: %v\n", schema, err)
		}
	}
	StopLogical()
	StopTLS()
	StopClockBehind()
	return code
}

// examplesURL creates schema on the shared database and returns the
// database's URL with it as search_path.
func examplesURL(schema string) (string, error) {
	if err := createDatabaseIfMissing(URL()); err != nil {
		return "", err
	}
	if err := execShared("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", err
	}
	if !strings.HasPrefix(URL(), "postgres://") && !strings.HasPrefix(URL(), "postgresql://") {
		return URL() + " search_path=" + schema, nil // the key=value form
	}
	u, err := url.Parse(URL())
	if err != nil {
		return "", fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func execShared(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
