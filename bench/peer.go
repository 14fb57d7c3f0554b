package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The peer: Watermill's SQL forwarder (bench/peers/watermill, a module of
// its own so that Watermill stays out of pgoutbox's go.mod), run as a
// process over the relay child's protocol (see childCommand), publishing to
// an in-memory publisher that counts. Its rows are labelled watermill.

const (
	designWatermill = "watermill"

	// watermillTopic is the forwarder's topic, peers/watermill's Topic:
	// its messages table and its offsets table.
	watermillTable   = "watermill_outbox"
	watermillOffsets = "watermill_offsets_outbox"
	// watermillDest is the topic the envelopes name, which the counting
	// publisher receives.
	watermillDest = "events"
	// watermillGroup is the forwarder's consumer group (peers/watermill).
	watermillGroup = "forwarder"

	watermillName = "watermill forwarder (watermill-sql v4, poll 10 ms, batch 1000)"
)

// peerDir is the peer module's directory: bench/peers/watermill from the
// repository's root (go run ./bench) or peers/watermill from bench/ (go
// test ./bench).
func peerDir() (string, error) {
	for _, d := range []string{"bench/peers/watermill", "peers/watermill"} {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", errors.New("the watermill peer's module (bench/peers/watermill) is not below the working directory: run from the repository's root")
}

// buildPeer builds the peer once into dir (the Go build cache keeps the
// compiled packages between invocations): GOWORK=off, so a go.work never
// pulls it into another module's graph.
func buildPeer(ctx context.Context, dir string) (string, error) {
	src, err := peerDir()
	if err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "watermill-peer")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the watermill peer in %s: %w\n%s", src, err, out)
	}
	return exe, nil
}

// peer returns the peer's executable, building it on first use.
func (h *harness) peer(ctx context.Context) (string, error) {
	if h.peerExe != "" || h.peerErr != nil {
		return h.peerExe, h.peerErr
	}
	dir, err := os.MkdirTemp("", "pgoutbox-bench-peer-")
	if err != nil {
		h.peerErr = err
		return "", err
	}
	h.peerTmp = dir
	start := time.Now()
	h.peerExe, h.peerErr = buildPeer(ctx, dir)
	if h.peerErr == nil {
		h.logf("watermill peer built in %s", time.Since(start).Round(time.Millisecond))
	}
	return h.peerExe, h.peerErr
}

// watermillSpec is the relay spec of a peer process on schema.
func (h *harness) watermillSpec(ctx context.Context, schema string) (relaySpec, error) {
	spec := h.spec(designWatermill, schema, pubMemory)
	exe, err := h.peer(ctx)
	spec.Exe = exe
	return spec, err
}

// setupWatermill creates a schema with the orders table and Watermill's
// own tables, as the peer creates them (its schema adapter's DDL): the
// peer runs once with init set and exits.
func (h *harness) setupWatermill(ctx context.Context, what string) (string, error) {
	s, err := h.setupBusiness(ctx, what)
	if err != nil {
		return s, err
	}
	spec, err := h.watermillSpec(ctx, s)
	if err != nil {
		return s, err
	}
	spec.Init = true
	c, err := spawnRelay(ctx, spec)
	if err != nil {
		return s, err
	}
	if err := c.cmd.Wait(); err != nil {
		return s, fmt.Errorf("watermill peer init: %w", err)
	}
	return s, nil
}

// watermillEnvelope is what forwarder.NewPublisher over sql.NewPublisher
// stores for an event: the message wrapped in an envelope naming its
// destination topic (json.Marshal of forwarder's messageEnvelope: the
// payload as base64), the event's index as metadata "aggregate_id", which
// the counting publisher checks off. The row's own metadata is the
// wrapping message's: empty.
func watermillEnvelope(o Order) ([]byte, error) {
	payload, err := json.Marshal(map[string]any{"order_id": o.ID, "customer_id": o.CustomerID, "total": o.Total})
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		DestinationTopic string            `json:"destination_topic"`
		UUID             string            `json:"uuid"`
		Payload          []byte            `json:"payload"`
		Metadata         map[string]string `json:"metadata"`
	}{watermillDest, uuid.NewString(), payload, map[string]string{"aggregate_id": o.ID}})
}

// watermillInsertSQL is DefaultPostgreSQLSchema's InsertQuery for one
// message.
const watermillInsertSQL = `INSERT INTO "` + watermillTable + `" (uuid, payload, metadata, transaction_id) VALUES ($1,$2,$3,pg_current_xact_id())`

// appWatermillOrder is CreateOrder with Watermill's forwarder: the order
// row and the enveloped event in one pgx transaction, as pgoutbox's
// application writers do (appCreateOrder), one statement each.
func appWatermillOrder(ctx context.Context, pool *pgxpool.Pool, o Order) error {
	env, err := watermillEnvelope(o)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`,
			o.ID, o.CustomerID, o.Total); err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if _, err := tx.Exec(ctx, watermillInsertSQL, uuid.NewString(), env, []byte("{}")); err != nil {
			return fmt.Errorf("insert into %s: %w", watermillTable, err)
		}
		return nil
	})
}

// fillWatermill adds n events with indexes [from, from+n) to Watermill's
// table in transactions of perTx, server-side, as fillTx does for
// pgoutbox's: the envelope appWatermillOrder writes, built in SQL.
func (h *harness) fillWatermill(ctx context.Context, schema string, from, n, perTx int) error {
	if n < 1 {
		return nil
	}
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET synchronous_commit")
	if _, err := conn.Exec(ctx, fillWatermillSQL(pgx.Identifier{schema, watermillTable}.Sanitize(), from, n, perTx)); err != nil {
		return fmt.Errorf("fill %d watermill events in transactions of %d: %w", n, perTx, err)
	}
	if _, err := h.exec(ctx, schema, "ANALYZE "+pgx.Identifier{watermillTable}.Sanitize()); err != nil {
		return err
	}
	h.checkpoint(ctx)
	return nil
}

// fillWatermillSQL is fillWatermill's DO block (numbers formatted in, the
// table a sanitized identifier). PostgreSQL's base64 breaks lines every 76
// characters: they are taken out, as Go's encoding writes none.
func fillWatermillSQL(table string, from, n, perTx int) string {
	last := from + n - 1
	return fmt.Sprintf(`DO $fill$
DECLARE b bigint;
BEGIN
  FOR b IN 0..%d LOOP
    INSERT INTO %s (uuid, payload, metadata, transaction_id)
    SELECT gen_random_uuid()::text, json_build_object(
        'destination_topic', '%s',
        'uuid', gen_random_uuid()::text,
        'payload', translate(encode(convert_to(json_build_object('order_id', i::text, 'customer_id', 'c' || (i %% 1000), 'total', 4999)::text, 'UTF8'), 'base64'), E'\n', ''),
        'metadata', json_build_object('aggregate_id', i::text)),
      '{}'::json, pg_current_xact_id()
    FROM generate_series(%d + b * %d, least(%d + (b + 1) * %d - 1, %d)) i;
    COMMIT;
  END LOOP;
END
$fill$`, (n+perTx-1)/perTx-1, table, watermillDest, from, perTx, from, perTx, last)
}

// watermillPendingSQL counts the rows past the forwarder's stored offset:
// those it has not forwarded yet (0 once it caught up).
const watermillPendingSQL = `SELECT count(*) FROM "` + watermillTable + `" m, "` + watermillOffsets + `" o
WHERE o.consumer_group = '` + watermillGroup + `' AND (m.transaction_id > o.last_processed_transaction_id
  OR (m.transaction_id = o.last_processed_transaction_id AND m."offset" > o.offset_acked))`

// pendingAfter is what a relay of design left undelivered in schema's
// table: pgoutbox's unprocessed rows, or the rows past Watermill's
// forwarder's offset.
func (h *harness) pendingAfter(ctx context.Context, design, schema string) (int64, error) {
	if design != designWatermill {
		return h.pendingCount(ctx, schema)
	}
	var n int64
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", schema); err != nil {
		return 0, err
	}
	err = tx.QueryRow(ctx, watermillPendingSQL).Scan(&n)
	return n, err
}
