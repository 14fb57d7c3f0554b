package console

import (
	"fmt"

	"github.com/pgoutbox/outbox/admin"
)

// chart is the overview's bar chart of events published per minute, drawn
// as inline SVG by the template from these numbers.
type chart struct {
	W, H   int // the plot area
	VW, VH int // the whole picture, with the axes' labels
	Bars   []bar
	Max    int64
	Total  int64
	Last   int64 // the current minute so far
	YTicks []tick
	XTicks []tick
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type tick struct {
	Pos   float64
	Label string
}

const (
	chartW = 720
	chartH = 140
)

func newChart(counts []admin.MinuteCount) chart {
	c := chart{W: chartW, H: chartH, VW: chartW + 72, VH: chartH + 30}
	for _, m := range counts {
		c.Max = max(c.Max, m.Count)
		c.Total += m.Count
	}
	if len(counts) > 0 {
		c.Last = counts[len(counts)-1].Count
	}
	top := niceCeil(c.Max)
	slot := float64(chartW) / float64(max(len(counts), 1))
	for i, m := range counts {
		h := 0.0
		if top > 0 {
			h = float64(m.Count) / float64(top) * chartH
		}
		if m.Count > 0 && h < 1 {
			h = 1 // a minute with events is never invisible
		}
		c.Bars = append(c.Bars, bar{X: float64(i)*slot + 1, Y: chartH - h, W: max(slot-2, 1), H: h,
			Title: fmt.Sprintf("%s UTC: %d published", m.Minute.UTC().Format("15:04"), m.Count)})
	}
	for _, f := range []int64{0, 1, 2} {
		v := top * f / 2
		c.YTicks = append(c.YTicks, tick{Pos: chartH - float64(v)/float64(max(top, 1))*chartH, Label: fmt.Sprint(v)})
	}
	n := len(counts)
	for i := 0; i < n; i += 15 {
		c.XTicks = append(c.XTicks, tick{Pos: float64(i) * slot, Label: fmt.Sprintf("-%d min", n-i)})
	}
	c.XTicks = append(c.XTicks, tick{Pos: chartW, Label: "now"})
	return c
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten, for the axis.
func niceCeil(n int64) int64 {
	if n <= 0 {
		return 0
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}
