package engine

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// fakeRows serves n claim rows, as the claim statement returns them, with
// every column derived from the row's index.
type fakeRows struct {
	pgx.Rows // what scanRows does not call
	n, i     int
	full     bool // the last column of the last row
}

var _ pgx.Rows = (*fakeRows)(nil)

func (f *fakeRows) Next() bool { f.i++; return f.i <= f.n }

func (f *fakeRows) Scan(dest ...any) error {
	k := f.i - 1
	var headers []byte
	if k%2 == 1 {
		headers = []byte(fmt.Sprintf(`{"k":"%d"}`, k))
	}
	vals := []any{[16]byte{byte(k), byte(k >> 8)}, int64(k), "t", fmt.Sprint(k), "e",
		[]byte(fmt.Sprintf(`{"n":%d}`, k)), k + 10, headers,
		pgtype.Timestamptz{Time: time.Unix(int64(k), 0), Valid: true}, k % 3, k%5 == 0, false,
		f.full && f.i == f.n}
	if len(dest) != len(vals) {
		return fmt.Errorf("scan: %d destinations for %d columns", len(dest), len(vals))
	}
	for j, d := range dest {
		reflect.ValueOf(d).Elem().Set(reflect.ValueOf(vals[j]))
	}
	return nil
}

func (f *fakeRows) Close()     {}
func (f *fakeRows) Err() error { return nil }

// TestScanRowsKeepsEveryRow: rows read across several allocation chunks
// keep their own values (no row shares memory with another), up to the
// claim's limit.
func TestScanRowsKeepsEveryRow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, limit int }{{0, 1000}, {1, 1000}, {17, 1000}, {300, 1000}, {1000, 1000}, {40, 40}, {5, 3}} {
		t.Run(fmt.Sprintf("%d of %d", c.n, c.limit), func(t *testing.T) {
			batch, more, err := scanRows(&fakeRows{n: c.n, full: true}, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) != c.n || more != (c.n > 0) {
				t.Fatalf("got %d rows (more %v), want %d (more %v)", len(batch), more, c.n, c.n > 0)
			}
			seen := map[*Row]bool{}
			for k, r := range batch {
				if seen[r] {
					t.Fatalf("row %d shares its memory with an earlier row", k)
				}
				seen[r] = true
				if r.Seq != int64(k) || r.AggregateID != fmt.Sprint(k) || string(r.Payload) != fmt.Sprintf(`{"n":%d}`, k) ||
					r.ID[0] != byte(k) || r.ID[1] != byte(k>>8) || r.stored != k+10 || r.Attempt != k%3+1 || r.Failed != (k%5 == 0) ||
					!r.CreatedAt.Equal(time.Unix(int64(k), 0)) {
					t.Fatalf("row %d read back wrong: %+v", k, r)
				}
				if (k%2 == 1) != (r.Headers["k"] == fmt.Sprint(k)) {
					t.Fatalf("row %d: headers %v", k, r.Headers)
				}
			}
		})
	}
}

// TestScanRowsAllocatesForTheRowsItReads: a claim that returns two rows
// under a limit of a thousand allocates room for a few rows, not for a
// thousand (a relay woken for every commit claims a few rows at a time,
// hundreds of times a second). Not parallel: it reads the process's
// allocation counter.
func TestScanRowsAllocatesForTheRowsItReads(t *testing.T) {
	const limit = 1000
	rowSize := int(unsafe.Sizeof(Row{}))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 20
	for range runs {
		if _, _, err := scanRows(&fakeRows{n: 2}, limit); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := int(after.TotalAlloc-before.TotalAlloc) / runs
	if per > 32*rowSize {
		t.Fatalf("a claim of 2 rows allocated %d bytes: room for %d rows of %d bytes, for a limit of %d",
			per, per/rowSize, rowSize, limit)
	}
}
