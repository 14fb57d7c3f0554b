// Package rate measures how many things happen per second over fixed
// windows, for the relay's batch delay and the Notifier's spacing. A window
// rather than a per-event average: two claims a fraction of a millisecond
// apart say nothing about the stream.
package rate

import "time"

// Window counts events over spans of Span and reports the rate of the last
// complete span. It is not safe for concurrent use.
type Window struct {
	Span time.Duration

	start time.Time
	n     float64
	rate  float64
	last  time.Time // last Add
}

// Add records n events at now.
func (w *Window) Add(now time.Time, n int) {
	if w.start.IsZero() {
		w.start = now
	}
	w.last = now
	w.n += float64(n)
	if el := now.Sub(w.start); el >= w.Span {
		w.rate = w.n / el.Seconds()
		w.start, w.n = now, 0
	}
}

// Rate is the events per second of the last complete span, or 0 when
// nothing was added for two spans (the stream stopped).
func (w *Window) Rate(now time.Time) float64 {
	if now.Sub(w.last) > 2*w.Span {
		return 0
	}
	return w.rate
}

// Gate tells a heavy stream from a light one, with hysteresis: heavy once
// the rate passes Above, light again only once it falls below three
// quarters of it. A pace that eases as the rate falls feeds back on the
// rate when the pace itself costs the writers: a stream slowed by the
// relay's claims would get more claims, and slow down further. It is not
// safe for concurrent use.
type Gate struct {
	Above float64 // events/s; 0 or less: never heavy

	heavy bool
}

// Heavy reports whether the stream is heavy at rate r.
func (g *Gate) Heavy(r float64) bool {
	switch {
	case g.Above <= 0:
		g.heavy = false
	case r > g.Above:
		g.heavy = true
	case r < g.Above*3/4:
		g.heavy = false
	}
	return g.heavy
}

// Ramp maps a rate to a fraction: 0 at or below
// above, rising linearly to 1 at twice above.
func Ramp(r, above float64) float64 {
	if r <= above || above <= 0 {
		return 0
	}
	return min(1, (r-above)/above)
}
