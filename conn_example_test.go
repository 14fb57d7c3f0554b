package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
)

// Give the pool the relay and Admin use a TCP user timeout, so a statement
// on a connection to a vanished server fails in seconds instead of after the
// kernel's retransmissions (about 15 minutes).
func ExampleSetTCPTimeouts() {
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	outbox.SetTCPTimeouts(&cfg.ConnConfig.Config, 0) // DefaultTCPUserTimeout
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	var one int
	if err := pool.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		panic(err)
	}
	fmt.Println("connected:", one == 1)
	// Output: connected: true
}
