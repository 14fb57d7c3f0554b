package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// resultsFile is what --json writes and `bench chart` reads: every figure's
// per-run values, so charts are drawn from a run's own measurements.
type resultsFile struct {
	Command string          `json:"command"`
	Date    time.Time       `json:"date"`
	Wall    string          `json:"wall"`
	Machine machine         `json:"machine"`
	Runs    int             `json:"runs"`
	Quick   bool            `json:"quick"`
	Loads   []float64       `json:"loads,omitempty"` // 1-minute load averages seen during the run
	Writers int             `json:"writers"`
	Rate    int             `json:"rate"` // latency figure's events/s
	Drains  []*drainFigure  `json:"drains,omitempty"`
	Writes  []*writeFigure  `json:"writes,omitempty"`
	Lats    []*latFigure    `json:"latencies,omitempty"`
	Growths []*growthFigure `json:"growths,omitempty"`
	Brokers []*drainFigure  `json:"brokers,omitempty"`

	WALDrains   []*drainFigure `json:"wal_drains,omitempty"`
	WALLats     []*latFigure   `json:"wal_latencies,omitempty"`
	WALSize     *walSizeFigure `json:"wal_size,omitempty"`
	WALPartSize *walSizeFigure `json:"wal_partitioned_size,omitempty"`
	WALSkipped  string         `json:"wal_skipped,omitempty"`
	CPURate     int            `json:"cpu_rate,omitempty"`
	CPU         []*writeFigure `json:"cpu,omitempty"`
}

func (r *results) file(m machine, opt options, cmdline string, started time.Time, wall time.Duration) resultsFile {
	cpuRate := 0
	if len(r.cpus) > 0 {
		cpuRate = opt.CPURate
	}
	return resultsFile{
		CPURate: cpuRate,
		Command: cmdline, Date: started.UTC(), Wall: wall.Round(time.Second).String(), Machine: m,
		Runs: opt.Runs, Quick: opt.Quick, Loads: r.loads, Writers: opt.Writers, Rate: opt.Rate,
		Drains: r.drains, Writes: r.writes, Lats: r.lats, Growths: r.growths, Brokers: r.brokers,
		WALDrains: r.walDrains, WALLats: r.walLats, WALSize: r.walSize, WALPartSize: r.walPartSize, WALSkipped: r.walSkipped,
		CPU: r.cpus,
	}
}

func writeResultsFile(path string, f resultsFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

func readResultsFile(path string) (resultsFile, error) {
	var f resultsFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
