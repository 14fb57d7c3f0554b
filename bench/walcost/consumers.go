package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgoutbox/outbox/internal/wal"
)

// consumeRows streams the outbox rows with the WAL source's Stream and
// settles each transaction at once, as a relay whose broker confirms
// instantly would; the settled events go to the maintenance goroutine.
func consumeRows(ctx context.Context, e *env) error {
	s, err := wal.Open(ctx, wal.StreamConfig{ConnString: e.h.url, Names: e.names})
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	for {
		tx, err := s.Next(ctx)
		if err != nil {
			return err
		}
		e.mu.Lock()
		for _, ev := range tx.Events {
			e.acked = append(e.acked, ev.ID)
			e.ackedSeq = append(e.ackedSeq, ev.Seq)
		}
		e.mu.Unlock()
		e.received.Add(int64(len(tx.Events)))
		if err := s.Ack(tx.LSN); err != nil {
			return err
		}
	}
}

// takeAcked hands the settled events over to maintenance.
func (e *env) takeAcked() ([]uuid.UUID, []int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids, seqs := e.acked, e.ackedSeq
	e.acked, e.ackedSeq = nil, nil
	return ids, seqs
}

// deleteAcked removes settled rows in bulk every 100 ms, on a connection of
// its own: the relay's cleanup, off the writers' path.
func deleteAcked(ctx context.Context, e *env) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ids, _ := e.takeAcked()
		if len(ids) == 0 {
			continue
		}
		if _, err := e.pool.Exec(ctx, `DELETE FROM outbox_events WHERE id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
}

// truncateAcked truncates each partition once every event in it has been
// settled, every 100 ms.
func truncateAcked(ctx context.Context, e *env) error {
	settled := map[int64]int{} // partition -> events settled
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, seqs := e.takeAcked()
		for _, s := range seqs {
			p := (s - 1) / partitionSize
			settled[p]++
			if settled[p] == partitionSize {
				if _, err := e.pool.Exec(ctx, fmt.Sprintf("TRUNCATE outbox_events_p%d", p)); err != nil {
					return fmt.Errorf("truncate: %w", err)
				}
			}
		}
	}
}

// consumeMessages reads the logical decoding messages pgoutput sends with
// messages 'true' and confirms each transaction's end at once.
func consumeMessages(ctx context.Context, e *env) error {
	cfg, err := pgconn.ParseConfig(e.h.url)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	err = pglogrepl.StartReplication(ctx, conn, e.names.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + e.names.QPublication + "'", "messages 'true'"},
	})
	if err != nil {
		return err
	}
	var confirmed pglogrepl.LSN
	status := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !pgconn.Timeout(err) {
			return err
		}
		if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) > 0 {
			switch cd.Data[0] {
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(cd.Data[1:])
				if err != nil {
					return err
				}
				m, err := pglogrepl.Parse(x.WALData)
				if err != nil {
					return err
				}
				switch m := m.(type) {
				case *pglogrepl.LogicalDecodingMessage:
					if m.Prefix == "pgoutbox" {
						e.received.Add(1)
					}
				case *pglogrepl.CommitMessage:
					confirmed = m.TransactionEndLSN
				}
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
				if err != nil {
					return err
				}
				if k.ReplyRequested {
					status = time.Time{}
				}
			}
		} else if er, ok := msg.(*pgproto3.ErrorResponse); ok {
			return errors.New(er.Message)
		}
		if time.Since(status) > 100*time.Millisecond {
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: confirmed}); err != nil {
				return err
			}
			status = time.Now()
		}
	}
}
