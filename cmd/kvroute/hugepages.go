package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/hugepage"
)

// hugePagesFlag is --huge-pages: whether the Go heap that holds a KV index is backed by 2 MiB transparent
// huge pages (internal/hugepage). off (the default) never; auto probes the host at start and takes them
// where reads pay; a number reserves that many MiB without asking. Pages are faulted in before the index
// uses them (a number: the whole reservation at start; auto: 256 MiB ahead of the heap's use, topped up
// every second, by a thread under SCHED_IDLE), so that no thread of the index waits for a huge page's
// first fault, which the runtime's stop-the-world would wait for too. Off by default for the memory:
// auto keeps 256 MiB resident ahead of the index, N holds N MiB.
func hugePagesFlag(fs *flag.FlagSet) *string {
	return fs.String("huge-pages", "off", "back the KV index with 2 MiB transparent huge pages (Linux, THP mode madvise or always): off (the default) = never; auto = once per process at start (a server in the background, after it listens), chase dependent loads through 256 MiB with 4 KiB and with 2 MiB pages (1–2 s, 256 MiB held meanwhile) and, where a load costs at most 90 % as much with the second (fastest of three chases each), reserve 1,024 MiB of Go heap advised MADV_HUGEPAGE, keeping 256 MiB of it faulted in ahead of the heap's use; N = reserve N MiB without probing (about the index: 48 B per (block, worker)), faulted in whole at start and resident from then on (the start waits while the host backs it: 4 s for 1,024 MiB on a 2-vCPU KVM guest the first time); the heap's growth past the reservation is advised every second (a thread under SCHED_IDLE). On that guest, index reads under the conversation trace's writes p99 14–41 → 10–14 µs; on a guest whose host uses small pages reads got slower, which auto's probe sees (docs/operations.md)")
}

// hugePagesAdvisePeriod is how often the heap's growth past the reservation is advised (a read of
// /proc/self/maps): what the runtime maps and touches in between stays in small pages. At 10 s, the
// 20 s bench's reads with auto's 1,024 MiB had p99 10.7–13.0 µs, at 1 s 9.7–10.8 µs (three runs each).
const hugePagesAdvisePeriod = time.Second

// The auto mode's probe (hugepage.Measure) and reservation. The probe's buffer is larger than any TLB
// reaches with small pages and near an index's size: on the KVM guest of docs/benchmarks.md the gain of
// huge pages grows with the buffer (a load costs 0.87–0.96 as much with them at 64 MiB, 0.78 at 256 MiB,
// 0.68 at 392 MiB), so a smaller probe would turn them down where the index gains.
const (
	hugeProbeBytes   = 256 << 20
	hugeProbeSteps   = 1 << 17
	autoHugePagesMiB = 1024
)

// autoHugePagesAheadMiB is how much of the free heap auto keeps faulted in ahead of the runtime's use
// (hugepage.Reserve's ahead), topped up on each periodic pass once half of it is used: the memory auto
// holds beyond what the process uses, where the whole reservation was resident from the start. A pass
// a second keeps ahead of an index growing 128 MiB a second.
const autoHugePagesAheadMiB = 256

// hugeAuto is the auto mode's decision. The heap is the process's, so the probe and the reservation are
// made once, by the first command that starts with auto, and hold for the process's life (the periodic
// advice too); later starts report the same decision.
var hugeAuto struct {
	once     sync.Once
	probe    hugepage.Probe
	mode     string
	on       bool
	reserved int            // MiB
	st       hugepage.Stats // what the reservation advised and faulted in
	err      error          // why the probe or the reservation could not be made
}

// startHugePages applies --huge-pages; stop ends the periodic advice of a reservation made for this
// start (a no-op for off and auto). With background, auto decides on a goroutine of its own and logs
// the decision when made: a server does not wait for the probe and the host backing what auto faults
// in (1–2 s), and its index, empty at start, loses nothing to a reservation made a few seconds late. A
// bench decides before it measures.
func startHugePages(val string, log *slog.Logger, background bool) (stop func(), err error) {
	if val == "auto" {
		if background {
			hugeDecide.Go(func() { decideHugePages(); logHugeAuto(log) })
		} else {
			decideHugePages()
			logHugeAuto(log)
		}
		return func() {}, nil
	}
	if hugePagesOff(val) {
		return func() {}, nil
	}
	mib, err := strconv.Atoi(val)
	if err != nil || mib < 0 {
		return nil, fmt.Errorf("--huge-pages %q: want auto, off or MiB ≥ 0", val)
	}
	h, st, err := hugepage.Reserve(mib<<20, mib<<20)
	if err != nil {
		return nil, fmt.Errorf("--huge-pages: %w", err)
	}
	h.Keep(hugePagesAdvisePeriod)
	if log != nil {
		mode, _ := hugepage.Mode()
		log.Info("huge pages: Go heap advised MADV_HUGEPAGE", "reserved_mib", mib, "advised_mib", st.Bytes>>20, "populated_mib", st.Populated>>20, "populate_ms", st.Populating.Milliseconds(), "mappings", st.Mappings, "thp_mode", mode)
	}
	return h.Stop, nil
}

// hugePagesOff reports whether --huge-pages val asks for no huge pages.
func hugePagesOff(val string) bool { return val == "off" || val == "0" }

// logHugeAuto logs auto's decision (made), if there is a log.
func logHugeAuto(log *slog.Logger) {
	if log == nil {
		return
	}
	a := &hugeAuto
	reserved := 0
	if a.on {
		reserved = a.reserved
	}
	log.Info("huge pages: auto", "on", a.on, "thp_mode", a.mode, "probe_mib", a.probe.Bytes>>20,
		"probe_ns_per_load_4k", fmt.Sprintf("%.0f", a.probe.SmallNanos), "probe_ns_per_load_2m", fmt.Sprintf("%.0f", a.probe.HugeNanos),
		"reserved_mib", reserved, "populated_mib", a.st.Populated>>20, "populate_ms", a.st.Populating.Milliseconds(), "err", a.err)
}

// decideHugePages makes the auto mode's decision, once per process.
func decideHugePages() {
	a := &hugeAuto
	a.once.Do(func() {
		if a.mode, a.err = hugepage.Mode(); a.err != nil {
			return
		}
		// The probe holds its buffer resident, and the reservation is address space that a host which
		// commits strictly counts: both at most a quarter of the machine.
		total, err := hugepage.MemTotal()
		if a.err = err; err != nil {
			return
		}
		if total < 4*hugeProbeBytes {
			a.err = fmt.Errorf("%d MiB of memory: too little to probe %d MiB", total>>20, hugeProbeBytes>>20)
			return
		}
		if a.probe, a.err = hugepage.Measure(hugeProbeBytes, hugeProbeSteps); a.err != nil || !a.probe.Worth() {
			return
		}
		n := min(autoHugePagesMiB<<20, total/4)
		a.reserved = n >> 20
		h, st, err := hugepage.Reserve(n, autoHugePagesAheadMiB<<20)
		if a.st, a.err = st, err; err != nil {
			return
		}
		h.Keep(hugePagesAdvisePeriod) // for the process's life: the heap outlives any one command
		a.on = true
	})
}

// hugePagesNotes describe --huge-pages val as it was applied, for a bench report: the mode (with auto, the
// probe's figures and decision) and, when the heap was advised, what that does to the report's
// dependent-load table.
func hugePagesNotes(val string) []string {
	s := fmt.Sprintf("Huge pages: --huge-pages %s.", val)
	on := !hugePagesOff(val)
	if val == "auto" {
		a := &hugeAuto
		on = a.on
		state := "off"
		if on {
			state = fmt.Sprintf("on (%d MiB of heap reserved and advised, %d MiB faulted in ahead of its use)", a.reserved, autoHugePagesAheadMiB)
		}
		s = fmt.Sprintf("Huge pages: --huge-pages auto, %s: one dependent load through %d MiB cost %.0f ns with 4 KiB pages and %.0f ns with 2 MiB pages (taken at ≤ 90 %%).",
			state, a.probe.Bytes>>20, a.probe.SmallNanos, a.probe.HugeNanos)
		if a.err != nil {
			s += fmt.Sprintf(" (%v)", a.err)
		}
	}
	if !on {
		return []string{s}
	}
	return []string{s, "With huge pages the dependent-load buffers are on the advised heap too: its \"ns per load\" column is then not 4 KiB pages (compare the columns in a run with --huge-pages off)."}
}
