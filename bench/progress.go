package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/routine"
)

// Progress is a progress bar on stderr: a redrawn line on a terminal, a line every 5 s otherwise (logs of
// `make bench`). Add is safe from any goroutine; Done stops the drawing goroutine.
type Progress struct {
	label string
	total atomic.Int64
	done  atomic.Int64
	start time.Time
	w     io.Writer
	tty   bool
	stop  chan struct{}
	group routine.Group
}

// progressDraw redraws a bar on a ticker until Done joins it.
var progressDraw = routine.Named("bench.progress")

// NewProgress starts a bar writing to w (os.Stderr when nil); total may be 0 (unknown) and set later.
func NewProgress(w io.Writer, label string, total int64) *Progress {
	if w == nil {
		w = os.Stderr
	}
	p := &Progress{label: label, start: time.Now(), w: w, stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	p.total.Store(total)
	every := 5 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	p.group.Go(progressDraw, func() { routine.Every(p.stop, every, func() { p.draw(false) }) })
	return p
}

// Add advances the bar by n.
func (p *Progress) Add(n int64) { p.done.Add(n) }

// SetTotal changes the total.
func (p *Progress) SetTotal(n int64) { p.total.Store(n) }

func (p *Progress) draw(final bool) {
	done, total := p.done.Load(), p.total.Load()
	el := time.Since(p.start).Truncate(100 * time.Millisecond)
	var line string
	if total > 0 {
		f := min(1, float64(done)/float64(total))
		const width = 30
		n := int(f * width)
		line = fmt.Sprintf("%s [%s%s] %d/%d %3.0f%% %s", p.label, strings.Repeat("#", n), strings.Repeat("-", width-n), done, total, 100*f, el)
	} else {
		line = fmt.Sprintf("%s %d %s", p.label, done, el)
	}
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%s\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// Done stops the bar and prints its final state.
func (p *Progress) Done() {
	close(p.stop)
	p.group.Wait()
	p.draw(true)
}
