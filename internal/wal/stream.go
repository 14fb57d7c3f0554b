package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgoutbox/outbox/outboxtype"
)

const (
	// DefaultStatusInterval is how often the stream reports its confirmed
	// position to the server when it has nothing else to say.
	DefaultStatusInterval = time.Second
	// DefaultTimeout is how long the stream waits for any message from the
	// server, which it asks to reply every StatusInterval, before it
	// presumes the connection dead.
	DefaultTimeout = 15 * time.Second
	// DefaultSenderTimeout is the stream's wal_sender_timeout: how long
	// the server waits for a silent relay before it ends the stream and
	// frees the slot for a standby.
	DefaultSenderTimeout = 10 * time.Second
	// DefaultBuffer is how many decoded transactions wait for Next.
	DefaultBuffer = 16
	// DefaultBufferBytes bounds their payloads (StreamConfig.BufferBytes).
	DefaultBufferBytes = 16 << 20
)

// StreamConfig configures a Stream.
type StreamConfig struct {
	// ConnString is an ordinary PostgreSQL URL or DSN; the stream adds
	// replication=database. The role needs REPLICATION (see Check).
	ConnString string
	// ConnConfig is used instead of ConnString when set (a pool's
	// connection settings, say); the stream works on a copy.
	ConnConfig *pgconn.Config
	// Names are the table's publication and slot (see NamesFor).
	Names Names
	// StartLSN is where to resume. Defaults to the slot's confirmed
	// position (0), which is what a restarting relay wants.
	StartLSN pglogrepl.LSN
	// StatusInterval defaults to DefaultStatusInterval.
	StatusInterval time.Duration
	// Timeout defaults to DefaultTimeout; it must exceed StatusInterval.
	Timeout time.Duration
	// SenderTimeout defaults to DefaultSenderTimeout.
	SenderTimeout time.Duration
	// Buffer defaults to DefaultBuffer.
	Buffer int
	// BufferBytes bounds the payload bytes of the transactions decoded
	// ahead of Next: past it the stream reads no further until Next takes
	// one, so large events do not pile up in memory. A transaction larger
	// than BufferBytes still passes, alone. Defaults to DefaultBufferBytes
	// (16 MiB).
	BufferBytes int
	// Pace and PaceAbove trade latency for CPU under a heavy stream: while
	// more than PaceAbove transactions a second arrive, the stream reads
	// the connection at most once per Pace (rising to it between that rate
	// and twice it), so each read, and each batch the relay publishes,
	// carries many transactions; and so while it reads a backlog
	// (transactions committed over a second before). 0 (the default) never
	// paces.
	Pace      time.Duration
	PaceAbove int
}

func (c *StreamConfig) fill() error {
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SenderTimeout == 0 {
		c.SenderTimeout = DefaultSenderTimeout
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	switch {
	case !validSlotName(c.Names.Slot):
		return fmt.Errorf("WAL source: slot name %q: want 1 to 63 characters of [a-z0-9_]", c.Names.Slot)
	case c.StatusInterval < 0 || c.Timeout < 0 || c.SenderTimeout < 0 || c.Buffer < 0 || c.BufferBytes < 0 || c.Pace < 0 || c.PaceAbove < 0:
		return errors.New("WAL source: StatusInterval, Timeout, SenderTimeout, Buffer, BufferBytes, Pace and PaceAbove must not be negative")
	case c.Pace > 0 && c.PaceAbove == 0:
		return fmt.Errorf("WAL source: Pace %s needs PaceAbove, the transactions per second above which it applies", c.Pace)
	case c.Timeout <= c.StatusInterval:
		return fmt.Errorf("WAL source: Timeout %s must exceed StatusInterval %s", c.Timeout, c.StatusInterval)
	}
	return nil
}

// Tx is one committed transaction's outbox events.
type Tx struct {
	// LSN is the end of the transaction's commit record: pass it to Ack
	// once every event is settled.
	LSN        pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
	// Events are the rows inserted into the outbox table, in the order
	// the transaction inserted them. Attempt is 1.
	Events []outboxtype.Message
	// DeliverAt holds, at an event's index, its deliver_at (scheduled
	// delivery); nil when no event of the transaction has one.
	DeliverAt []time.Time
	// Errors are rows of the outbox table the stream could not decode;
	// they are still in the table.
	Errors []*DecodeError

	size int64 // its payloads' bytes, counted against BufferBytes
}

// Stream reads the committed outbox events of one slot, a transaction at a
// time in commit order. One goroutine owns the connection: it decodes ahead
// of Next up to Buffer transactions and BufferBytes of payloads, answers the server's keepalives and
// reports the confirmed position, so a caller busy publishing never makes
// the server drop the stream. Next and Ack may be called from different
// goroutines.
type Stream struct {
	cfg   StreamConfig
	conn  *pgconn.PgConn
	prog  *progress
	pace  *pacer
	dec   *decoder
	rels  map[uint32]*relation
	out   chan *Tx
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	err   error // why the stream ended; read after done is closed
	unreg func() bool

	// buffered is the payload bytes in out; room is signalled when Next
	// takes a transaction from it.
	buffered atomic.Int64
	room     chan struct{}

	tx       *Tx           // the transaction being decoded
	lastTx   int           // events of the last transaction handed out: the next one's first guess
	cells    []cell        // the row being decoded, reused
	inTx     bool          // between Begin and Commit
	received pglogrepl.LSN // the furthest position the server has sent
	// noFlushUntil: report no flush position until then (see sendStatus).
	noFlushUntil time.Time
}

// maxTxGuess caps the events a transaction's slice is first made for.
const maxTxGuess = 256

// noFlushFor is how long the stream reports no flush position after the
// server asked for a reply.
const noFlushFor = 10 * time.Second

// Open connects with a replication connection and starts streaming the
// slot from cfg.StartLSN. A slot streamed by another process gives a
// *SlotBusyError (errors.Is ErrSlotBusy); a missing or invalidated slot
// gives ErrSlotLost. The stream runs until Close or until ctx ends.
func Open(ctx context.Context, cfg StreamConfig) (*Stream, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	var pc *pgconn.Config
	if cfg.ConnConfig != nil {
		pc = cfg.ConnConfig.Copy()
		rp := make(map[string]string, len(pc.RuntimeParams)+4)
		for k, v := range pc.RuntimeParams {
			rp[k] = v
		}
		pc.RuntimeParams = rp
	} else {
		var err error
		if pc, err = pgconn.ParseConfig(cfg.ConnString); err != nil {
			return nil, fmt.Errorf("WAL source: connection string: %w", err)
		}
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = "pgoutbox relay " + cfg.Names.Slot
	pc.RuntimeParams["wal_sender_timeout"] = strconv.FormatInt(cfg.SenderTimeout.Milliseconds(), 10)
	pc.RuntimeParams["DateStyle"] = "ISO"
	// pgoutput converts the rows' text to the client encoding: UTF-8 for
	// Go strings and JSON, whatever the database's (LATIN1, say).
	pc.RuntimeParams["client_encoding"] = "UTF8"
	pace := newPacer(cfg.Pace, cfg.PaceAbove)
	if dial := pc.DialFunc; dial != nil && cfg.Pace > 0 {
		pc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &pacedConn{Conn: c, p: pace}, nil
		}
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("WAL source: connect: %w", err)
	}
	start, err := startPosition(ctx, conn, cfg)
	if err == nil {
		err = pglogrepl.StartReplication(ctx, conn, cfg.Names.Slot, start, pglogrepl.StartReplicationOptions{
			Mode:       pglogrepl.LogicalReplication,
			PluginArgs: []string{"proto_version '1'", "publication_names " + literal(cfg.Names.QPublication)},
		})
		if err != nil {
			err = classify(cfg.Names.Slot, err)
		}
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	s := &Stream{
		cfg:  cfg,
		conn: conn,
		prog: newProgress(start),
		pace: pace,
		dec:  newDecoder(),
		rels: map[uint32]*relation{},
		out:  make(chan *Tx, cfg.Buffer),
		room: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	stopCtx := context.AfterFunc(ctx, func() { s.halt() })
	s.unreg = stopCtx
	go s.run()
	return s, nil
}

// startPosition is cfg.StartLSN or the slot's confirmed position, read on
// the replication connection (which runs simple SQL in database mode). The
// stream's first status report must not move the slot backwards.
func startPosition(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig) (pglogrepl.LSN, error) {
	q := "SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots WHERE slot_name = " + literal(cfg.Names.Slot)
	res, err := conn.Exec(ctx, q).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("WAL source: read slot %s: %w", cfg.Names.Slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) == 0 {
		return 0, fmt.Errorf("WAL source: slot %s does not exist: %w", cfg.Names.Slot, ErrSlotLost)
	}
	row := res[0].Rows[0]
	if string(row[1]) == "lost" {
		return 0, fmt.Errorf("WAL source: slot %s was invalidated (wal_status lost: it kept more WAL than max_slot_wal_keep_size): %w", cfg.Names.Slot, ErrSlotLost)
	}
	confirmed, err := pglogrepl.ParseLSN(string(row[0]))
	if err != nil {
		return 0, fmt.Errorf("WAL source: slot %s: confirmed_flush_lsn %q: %w", cfg.Names.Slot, row[0], err)
	}
	return max(confirmed, cfg.StartLSN), nil
}

// Next returns the next committed transaction with outbox events (or rows
// that failed to decode). After the stream ends it returns why: ErrClosed,
// ErrTimeout, ErrSlotLost, a connection error.
func (s *Stream) Next(ctx context.Context) (*Tx, error) {
	select {
	case tx, ok := <-s.out:
		if !ok {
			return nil, s.err
		}
		s.took(tx)
		return tx, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TryNext is Next without waiting: the next decoded transaction if one is
// ready. ok is false when none is, or when the stream has ended (Err says
// why).
func (s *Stream) TryNext() (tx *Tx, ok bool) {
	select {
	case tx, ok := <-s.out:
		if ok {
			s.took(tx)
		}
		return tx, ok
	default:
		return nil, false
	}
}

// took releases tx's bytes from the buffer's budget.
func (s *Stream) took(tx *Tx) {
	s.buffered.Add(-tx.size)
	select {
	case s.room <- struct{}{}:
	default:
	}
}

// Ack settles the transaction that ends at lsn (Tx.LSN): every one of its
// events was confirmed by the broker or handed to the table. The slot's
// confirmed position moves past it once every earlier transaction is
// settled too; acknowledgements may come in any order.
func (s *Stream) Ack(lsn pglogrepl.LSN) error { return s.prog.ack(lsn) }

// Confirmed is the position the stream reports to the server: a restart
// streams the transactions that commit after it.
func (s *Stream) Confirmed() pglogrepl.LSN { return s.prog.position() }

// Unsettled is how many transactions were handed out and not acknowledged.
func (s *Stream) Unsettled() int { return s.prog.unsettled() }

// Done is closed when the stream has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err is why the stream ended, once Done is closed.
func (s *Stream) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close reports the confirmed position one last time and ends the
// connection, freeing the slot. It waits until the stream has stopped or
// ctx ends.
func (s *Stream) Close(ctx context.Context) error {
	s.unreg()
	s.halt()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		_ = s.conn.Conn().Close()
		return ctx.Err()
	}
}

// halt asks the run loop to stop and wakes it from a blocked read.
func (s *Stream) halt() {
	s.once.Do(func() {
		close(s.stop)
		_ = s.conn.Conn().SetReadDeadline(time.Now())
	})
}

func (s *Stream) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// run owns the connection until the stream ends.
func (s *Stream) run() {
	err := s.loop()
	if s.stopping() && !errors.Is(err, ErrTimeout) {
		err = ErrClosed
	}
	if !s.conn.IsClosed() {
		// The last word: how far the slot may move, then goodbye.
		_ = s.conn.Conn().SetDeadline(time.Now().Add(time.Second))
		_ = s.sendStatus(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.conn.Close(ctx)
		cancel()
	}
	s.err = err
	close(s.out)
	close(s.done)
}

func (s *Stream) loop() error {
	now := time.Now()
	lastRecv, nextStatus := now, now.Add(s.cfg.StatusInterval)
	var set time.Time // the read deadline in force
	for {
		deadline := nextStatus
		if d := lastRecv.Add(s.cfg.Timeout); d.Before(deadline) {
			deadline = d
		}
		// Set only when it changes: about once per StatusInterval under a
		// stream, not once per message.
		if !deadline.Equal(set) {
			if err := s.conn.Conn().SetReadDeadline(deadline); err != nil {
				return err
			}
			set = deadline
		}
		if s.stopping() { // checked after the deadline is set: halt's wins
			return ErrClosed
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		now = time.Now()
		if err != nil {
			if s.stopping() {
				return ErrClosed
			}
			if !isTimeout(err) {
				return fmt.Errorf("WAL source: slot %s: %w", s.cfg.Names.Slot, err)
			}
			set = time.Time{} // the deadline passed: set the next one
			if now.Sub(lastRecv) >= s.cfg.Timeout {
				return fmt.Errorf("WAL source: slot %s: no message from the server for %s: %w", s.cfg.Names.Slot, s.cfg.Timeout, ErrTimeout)
			}
			// Idle: report and ask for a reply, which proves the server alive.
			if err := s.sendStatus(true); err != nil {
				return err
			}
			nextStatus = now.Add(s.cfg.StatusInterval)
			continue
		}
		lastRecv = now
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			tx, err := s.handle(m.Data)
			if err != nil {
				return err
			}
			if tx != nil {
				if err := s.deliver(tx, &nextStatus); err != nil {
					return err
				}
				lastRecv = time.Now() // the wait was the caller's, not the server's
			}
		case *pgproto3.ErrorResponse:
			return classify(s.cfg.Names.Slot, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return fmt.Errorf("WAL source: slot %s: the server ended the stream", s.cfg.Names.Slot)
		}
		if !now.Before(nextStatus) {
			if err := s.sendStatus(false); err != nil {
				return err
			}
			nextStatus = now.Add(s.cfg.StatusInterval)
		}
	}
}

// deliver hands tx to Next once the buffer has room for it (BufferBytes),
// reporting the position on schedule while the caller is busy so the
// server does not take the wait for a dead relay.
func (s *Stream) deliver(tx *Tx, nextStatus *time.Time) error {
	s.prog.add(tx.LSN)
	for _, ev := range tx.Events {
		tx.size += int64(Size(&ev))
	}
	for {
		if b := s.buffered.Load(); b == 0 || b+tx.size <= int64(s.cfg.BufferBytes) {
			break
		}
		if err := s.await(s.room, nextStatus); err != nil {
			return err
		}
	}
	s.buffered.Add(tx.size)
	select { // most often the caller is waiting: no timer needed
	case s.out <- tx:
		return nil
	default:
	}
	for {
		t := time.NewTimer(time.Until(*nextStatus))
		select {
		case s.out <- tx:
			t.Stop()
			return nil
		case <-s.stop:
			t.Stop()
			return ErrClosed
		case <-t.C:
			if err := s.statusDue(nextStatus); err != nil {
				return err
			}
		}
	}
}

// await waits for ready, reporting the position on schedule meanwhile.
func (s *Stream) await(ready <-chan struct{}, nextStatus *time.Time) error {
	t := time.NewTimer(time.Until(*nextStatus))
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-s.stop:
		return ErrClosed
	case <-t.C:
		return s.statusDue(nextStatus)
	}
}

// statusDue reports the position and schedules the next report.
func (s *Stream) statusDue(nextStatus *time.Time) error {
	if err := s.sendStatus(false); err != nil {
		return err
	}
	*nextStatus = time.Now().Add(s.cfg.StatusInterval)
	return nil
}

// handle processes one CopyData message and returns a completed
// transaction with something to hand out.
func (s *Stream) handle(data []byte) (*Tx, error) {
	if len(data) == 0 {
		return nil, nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return nil, fmt.Errorf("WAL source: keepalive: %w", err)
		}
		s.received = max(s.received, k.ServerWALEnd)
		if !s.inTx {
			s.prog.reached(k.ServerWALEnd)
		}
		if k.ReplyRequested {
			s.noFlushUntil = time.Now().Add(noFlushFor)
			return nil, s.sendStatus(false)
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return nil, fmt.Errorf("WAL source: XLogData: %w", err)
		}
		s.received = max(s.received, x.ServerWALEnd)
		return s.decode(x)
	}
	return nil, nil
}

// decode processes one pgoutput message.
func (s *Stream) decode(x pglogrepl.XLogData) (*Tx, error) {
	if len(x.WALData) == 0 {
		return nil, nil
	}
	if x.WALData[0] == byte(pglogrepl.MessageTypeInsert) {
		// Most messages: read in place (parseInsert), not through parse.
		return nil, s.insert(x)
	}
	msg, err := parse(x.WALData)
	if err != nil {
		return nil, fmt.Errorf("WAL source: slot %s: message at %s: %w", s.cfg.Names.Slot, x.WALStart, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		s.rels[m.RelationID] = newRelation(m, s.cfg.Names)
	case *pglogrepl.BeginMessage:
		s.tx, s.inTx = &Tx{Xid: m.Xid}, true
	case *pglogrepl.CommitMessage:
		tx := s.tx
		s.tx, s.inTx = nil, false
		s.pace.commit(time.Now(), m.CommitTime)
		if tx == nil {
			return nil, nil
		}
		tx.LSN, tx.CommitTime = m.TransactionEndLSN, m.CommitTime
		for _, d := range tx.Errors {
			d.Commit = tx.LSN
		}
		if len(tx.Events) == 0 && len(tx.Errors) == 0 {
			s.prog.reached(tx.LSN)
			return nil, nil
		}
		s.lastTx = len(tx.Events)
		return tx, nil
	}
	// Updates, deletes, truncates, types and origins carry no new event.
	return nil, nil
}

// insert decodes an Insert message into the transaction's events.
func (s *Stream) insert(x pglogrepl.XLogData) error {
	rel, cells, err := parseInsert(x.WALData, s.cells)
	s.cells = cells
	if err != nil {
		return fmt.Errorf("WAL source: slot %s: message at %s: %w", s.cfg.Names.Slot, x.WALStart, err)
	}
	r, ok := s.rels[rel]
	if !ok {
		return fmt.Errorf("WAL source: slot %s: insert at %s into relation %d before its relation message", s.cfg.Names.Slot, x.WALStart, rel)
	}
	if !r.outbox || s.tx == nil || r.handedOver(cells) {
		return nil
	}
	ev, at, derr := s.dec.message(r, cells, x.WALStart)
	if s.tx.Events == nil {
		// Sized as the last transaction was: most streams repeat one shape.
		s.tx.Events = make([]outboxtype.Message, 0, max(1, min(s.lastTx, maxTxGuess)))
	}
	switch {
	case derr != nil:
		s.tx.Errors = append(s.tx.Errors, derr)
	case !at.IsZero() || s.tx.DeliverAt != nil:
		if s.tx.DeliverAt == nil {
			s.tx.DeliverAt = make([]time.Time, len(s.tx.Events), cap(s.tx.Events)+1)
		}
		s.tx.DeliverAt = append(s.tx.DeliverAt, at)
		fallthrough
	default:
		s.tx.Events = append(s.tx.Events, ev)
	}
	return nil
}

// parse is pglogrepl.Parse, which indexes the message without bounds
// checks: a malformed message is an error, not a panic.
func parse(data []byte) (msg pglogrepl.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed pgoutput message %q: %v", data[0], r)
		}
	}()
	return pglogrepl.Parse(data)
}

// sendStatus reports the stream's positions. The slot's confirmed position
// follows the flush position: the acknowledged one. A server shutting down
// waits until each walsender's client reports having flushed everything it
// sent (or, when the client reports no flush position, written it); a relay
// whose broker is down would hold the shutdown forever. So after the
// server asks for a reply (which it does only when shutting down, or when
// it has not heard from the stream for half its wal_sender_timeout), the
// stream reports no flush position for a while: the write position, all it
// received, then lets the shutdown proceed, and the slot's confirmed
// position, which only a flush position moves, stays where it was.
func (s *Stream) sendStatus(reply bool) error {
	lsn := s.prog.position()
	flush := lsn
	if time.Now().Before(s.noFlushUntil) {
		flush = 0
	}
	if err := sendStandbyStatus(s.conn, max(lsn, s.received), flush, reply); err != nil {
		return fmt.Errorf("WAL source: slot %s: report position %s: %w", s.cfg.Names.Slot, lsn, err)
	}
	return nil
}

// sendStandbyStatus sends a Standby Status Update. It is written here
// because pglogrepl's replaces a zero flush position with the write
// position, which would confirm the slot past unsettled transactions.
func sendStandbyStatus(conn *pgconn.PgConn, write, flush pglogrepl.LSN, reply bool) error {
	data := make([]byte, 0, 34)
	data = append(data, pglogrepl.StandbyStatusUpdateByteID)
	data = binary.BigEndian.AppendUint64(data, uint64(write))
	data = binary.BigEndian.AppendUint64(data, uint64(flush))
	data = binary.BigEndian.AppendUint64(data, uint64(flush)) // applied
	data = binary.BigEndian.AppendUint64(data, uint64(time.Since(pgEpoch).Microseconds()))
	if reply {
		data = append(data, 1)
	} else {
		data = append(data, 0)
	}
	buf, err := (&pgproto3.CopyData{Data: data}).Encode(nil)
	if err != nil {
		return err
	}
	return conn.Frontend().SendUnbufferedEncodedCopyData(buf)
}

// Size is what a message holds in memory of its payload and headers: what
// the byte budgets count (a plain INSERT may store megabytes of headers).
func Size(m *outboxtype.Message) int {
	n := len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}

// pgEpoch is PostgreSQL's epoch, from which protocol timestamps count.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
