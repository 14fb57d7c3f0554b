package outboxcli

import (
	"fmt"
	"sync"
	"time"
)

// progress shows a status line on stdout: redrawn in place on a terminal,
// printed as plain lines at most once per cli.progressEvery otherwise (logs
// and pipes get readable lines, not carriage returns).
type progress struct {
	c     *cli
	mu    sync.Mutex
	shown bool // a redrawable line is on screen
	last  time.Time
}

func (c *cli) progress() *progress { return &progress{c: c} }

// update shows line as the current progress.
func (p *progress) update(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.stdoutTTY {
		fmt.Fprintf(p.c.stdout, "\r\033[K%s", line)
		p.shown = true
		return
	}
	if now := time.Now(); now.Sub(p.last) >= p.c.progressEvery {
		p.last = now
		fmt.Fprintln(p.c.stdout, line)
	}
}

// println prints a line of its own, above the progress line on a terminal.
func (p *progress) println(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.c.stdout, "\r\033[K")
		p.shown = false
	}
	fmt.Fprintf(p.c.stdout, format+"\n", args...)
}

// done clears the progress line.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.c.stdout, "\r\033[K")
		p.shown = false
	}
}
