// Command orders runs the reference article's order service and a
// downstream shipping service end to end, on the local PostgreSQL and NATS
// JetStream, and shows that the inbox makes every order ship exactly once
// although every order.created event is delivered twice.
//
//	go run ./examples/orders
//	go run ./examples/orders -orders 100 -nats-url nats://127.0.0.1:4222
//
// See README.md beside this file.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
)

func main() {
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		dbURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	var opts Options
	flag.StringVar(&opts.DatabaseURL, "database-url", dbURL, "PostgreSQL URL (default: $DATABASE_URL)")
	flag.StringVar(&opts.NATSURL, "nats-url", "", "NATS server with JetStream (default: start an embedded one)")
	flag.IntVar(&opts.Orders, "orders", 20, "number of orders to create")
	flag.BoolVar(&opts.Keep, "keep", false, "keep the schema and stream afterwards, for inspection")
	verbose := flag.Bool("v", false, "log the relay and the consumer")
	flag.Parse()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}
