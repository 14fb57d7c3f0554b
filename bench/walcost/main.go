// Command walcost measures what the WAL source's designs cost the writers:
// their throughput with only the business row, with an outbox row, with
// pg_logical_emit_message instead of a row, and with the ways delivered
// rows can leave the table (bulk DELETE by the relay, truncated partitions),
// each with a logical replication stream consuming the events as the WAL
// relay would.
//
// The machine it runs on may be shared and noisy, so every variant runs
// once per round, rounds interleave the variants, and the report gives each
// variant's median throughput and the median of its per-round ratio to the
// business-row-only writers of the same round.
//
//	go run ./bench/walcost -rounds 3 -window 4s -writers 8
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	var (
		dbURL   = flag.String("db", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (wal_level=logical, a role with REPLICATION)")
		rounds  = flag.Int("rounds", 3, "rounds; each runs every variant once")
		window  = flag.Duration("window", 4*time.Second, "how long the writers write in each run")
		writers = flag.Int("writers", 8, "concurrent writers")
		only    = flag.String("only", "", "run only these variants (comma-separated names)")
		drainN  = flag.Int("drain", 0, "instead of the write-cost rounds: commit this many events with a slot and no reader, then time one stream reading them")
		txSize  = flag.Int("drain-tx", 100, "-drain: events per transaction")
		cpuProf = flag.String("cpuprofile", "", "write this process's CPU profile to the file")
		private = flag.Bool("private", false, "run against a private PostgreSQL 15 cluster started for the run (initdb, pg_ctl) instead of -db")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	postmaster := 0
	if *private {
		c, err := startPrivate(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer c.stop()
		*dbURL, postmaster = c.url(), c.pid
		log.Printf("private cluster at %s", *dbURL)
	}
	if *drainN > 0 {
		if err := drain(ctx, *dbURL, *drainN, *txSize, postmaster); err != nil {
			log.Print(err)
		}
		return
	}
	h, err := newHarness(ctx, *dbURL, *writers, *window, postmaster)
	if err != nil {
		log.Print(err)
		return
	}
	defer h.close()
	results := map[string][]result{}
	for r := range *rounds {
		// Each round starts one variant further, so no variant always
		// follows the same one.
		for k := range variants {
			v := variants[(k+r)%len(variants)]
			if *only != "" && !slices.Contains(strings.Split(*only, ","), v.name) {
				continue
			}
			res, err := h.run(ctx, v)
			if err != nil {
				log.Printf("round %d, %s: %v", r+1, v.name, err)
				return
			}
			log.Printf("round %d %-22s %6.0f orders/s, %4.0f WAL B/order, server CPU %4.0f µs/order, bench process %4.0f µs/order, consumer behind by %d, table +%s, %d autovacuums",
				r+1, v.name, res.perSec(), res.per(float64(res.walBytes)), res.per(float64(res.serverCPU.Microseconds())), res.per(float64(res.selfCPU.Microseconds())),
				res.behind, size(res.tableBytes), res.vacuums)
			results[v.name] = append(results[v.name], res)
		}
	}
	report(results, *rounds, *writers, *window)
}

// report prints one line per variant: medians over the rounds.
func report(results map[string][]result, rounds, writers int, window time.Duration) {
	fmt.Printf("\nwalcost: %d writers, %s per run, %d rounds; medians over the rounds; ratios within each round\n\n", writers, window, rounds)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "variant\torders/s\tvs business only\tvs outbox row, no slot\tWAL B/order\tserver CPU µs/order\tbench process CPU µs/order\tconsumer behind at end\toutbox table+indexes growth\tautovacuums")
	base, row := results["business-only"], results["row-no-slot"]
	for _, v := range variants {
		rs := results[v.name]
		if len(rs) == 0 {
			continue
		}
		var per, vsBase, vsRow, behind, bytes, vac, walB, srv, self []float64
		for i, r := range rs {
			per = append(per, r.perSec())
			if i < len(base) {
				vsBase = append(vsBase, r.perSec()/base[i].perSec())
			}
			if i < len(row) {
				vsRow = append(vsRow, r.perSec()/row[i].perSec())
			}
			behind = append(behind, float64(r.behind))
			bytes = append(bytes, float64(r.tableBytes))
			vac = append(vac, float64(r.vacuums))
			walB = append(walB, r.per(float64(r.walBytes)))
			srv = append(srv, r.per(float64(r.serverCPU.Microseconds())))
			self = append(self, r.per(float64(r.selfCPU.Microseconds())))
		}
		fmt.Fprintf(w, "%s\t%.0f\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.0f\n", v.name, median(per), ratio(vsBase), ratio(vsRow),
			median(walB), median(srv), median(self), median(behind), size(int64(median(bytes))), median(vac))
	}
	w.Flush()
}

func ratio(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", median(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func size(b int64) string {
	switch {
	case b < 0:
		return "-"
	case b < 1<<20:
		return fmt.Sprintf("%d kB", b>>10)
	default:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
