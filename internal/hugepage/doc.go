// Package hugepage backs the Go heap with 2 MiB transparent huge pages on hosts whose THP mode is
// "madvise" (the Debian and Ubuntu default), where the Go runtime never asks for them.
//
// # Why
//
// The KV index is hundreds of MB of small nodes, and a query under the writers' traffic is a chain of
// dependent cache misses (scoring/prefix's doc). With 4 KiB pages each such miss is also a TLB miss, and
// in a virtual machine a TLB miss walks two page tables (the guest's and the host's). Measured here
// (a dependent load into a buffer of the index's size, 2 vCPUs, KVM guest): 4 KiB pages 230–278 ns, the
// same buffer advised MADV_HUGEPAGE 176–180 ns. On the conversation trace at 1,000 workers
// (kvroute bench indexer --trace … --workers 1000 --block-size 16 --capacity 1000000, old and new
// alternately, one process each):
//
//	                       4 KiB pages              --huge-pages 1536
//	4 s (2.2 M blocks/s)   p99 18.0–20.0 µs         p99 10.4–11.8 µs   (p999 42–80 → 37–45 µs)
//	20 s (0.45 M/s)        p99 17.8–21.1 µs         p99 15.1–16.6 µs
//	unpaced writes         10.8–12.2 M blocks/s     14.3–15.9 M blocks/s
//
// The host set to THP "always" gave the same (4 s: p99 10.7–11.0 µs; 20 s: 14.7–16.7 µs); the resident
// set did not grow (620–750 MB either way). It depends on the host: on a guest whose host backs it with
// small pages (an earlier machine of docs/benchmarks.md, THP "always") the bench got worse, since a
// guest's huge page does not shorten the host's walk. Hence a probe to decide.
//
// # Deciding by probe
//
// Measure chases dependent loads through a mapping of small pages (advised MADV_NOHUGEPAGE) and then
// through one of huge pages (Mapped), one at a time; Probe.Worth takes huge pages where their load costs
// at most 90 % of the small pages' one (each the fastest of three chases). The buffer must be about an index's size: the gain grows with it,
// as the small pages' page tables stop fitting in the caches. On the 2-vCPU KVM guest of
// docs/benchmarks.md, a load with huge pages cost 0.87–0.96 of a small page's at 64 MiB, 0.89–0.98 at
// 128 MiB, 0.78 at 256 MiB (234 against 182 ns; probing took 0.7–2.2 s, the first time the host backed
// the memory) and 0.68 at 392 MiB. kvroute's --huge-pages auto probes 256 MiB once per process and
// reserves 1,024 MiB when it pays (off by default: the start takes longer, by the probe and while the
// host backs what is faulted in ahead; docs/operations.md). On the guest whose host has
// small pages, a chase at 400 MiB cost 401 ns with huge pages against 326 without: the probe turns them
// down there.
//
// # How
//
// The Go runtime maps heap arenas with plain mmap and never advises them, so under "madvise" no heap page
// is ever huge. Advising memory that is already in use does not help by itself: its pages stay 4 KiB
// until khugepaged or MADV_COLLAPSE rewrites them, and a collapse under live readers stalls them (p999
// 3–5 ms in the runs above, collapse every 100 ms). So Reserve makes the heap grow first, by allocations
// the runtime maps but never touches, advises the heap's mappings MADV_HUGEPAGE, and drops the
// allocations: the pages the index then allocates are faulted in after the advice, as 2 MiB pages. The
// allocations are 64 MiB each, not one: the runtime zeroes a large object whole when any of its pages
// was used before, and a single 1 GiB object reaching into freed heap was written (and backed by the
// host) whole: a peak RSS of 1.18 GB where the probe's 409 MB is the peak now (kvroute bench indexer
// --minutes 0.05 --duration 0 --huge-pages auto; TestReserveTouchesNothing).
// Heap growth past the reservation is mapped by the runtime afresh (mmap MAP_FIXED over its reserved
// range, which drops the advice); Heap.Advise, run periodically (Keep), advises those new mappings
// too, so the part of them not yet touched is faulted huge.
//
// Faulted in ahead of use. A huge page's first fault zeroes 2 MiB while its thread waits, and the Go
// runtime's stop-the-world waits for that thread. In a guest whose host takes free memory back (a
// virtio balloon with free page reporting at order 9: every free 2 MiB block is handed to the host),
// the host must back the page's 512 small pages on that fault too: a first touch of 512 MiB advised
// MADV_HUGEPAGE cost 9.0 ms a huge page on average, 39 of 256 over 10 ms, the longest 44.5 ms, and the
// same memory touched again 0.26 ms (with 4 KiB pages the same cost is spread over 512 faults of a few
// µs). The index bench's stop-the-world waits of 12–101 ms were those faults. So Reserve hands the
// dropped allocations back to the kernel first (debug.FreeOSMemory: the runtime now counts those pages
// released, and its scavenger, which would return freed pages 64 KiB at a time and split every huge
// page it touched, leaves them alone until it allocates them), then faults in the pages the runtime
// will use next with MADV_POPULATE_WRITE (Linux 5.14; a page already there is left as it is, nothing is
// written), from a system call, where a thread does not hold up a stop-the-world. The runtime's page
// allocator takes the lowest free addresses first, so those are the lowest huge pages the kernel does
// not hold (mincore), as many as Reserve's ahead asks. Each pass of Advise measures what is still
// ahead (the bytes the runtime counts released that the kernel holds) and, once that is under half of
// ahead, faults in the next. With ahead at the reservation's size (--huge-pages N) the whole reservation
// is resident from the start; kvroute's auto keeps 256 MiB ahead, so its memory follows the index:
// kvroute serve's RSS 404 MB against 1,058 MB when auto faulted the whole GiB in (off: 240–261 MB;
// TestReservePopulated checks the heap holds the budget and no more beyond the runtime's use). On the
// 4 s bench (0.1 GB of index a second) the passes found 94–214 MiB still ahead, each top-up 150–270 MiB
// in 0.3–0.95 s. The start waits while the host backs what is faulted in (1 GiB: 4.0 s the first time on
// that guest, 0.1 s when the memory was just used; auto's 256 MiB: 0.95–1.2 s, and that short bench
// with auto took 2.4–4.5 s against 8.8 s with the whole GiB, 0.8 s off), and the runtime counts
// those pages released until it allocates them: under a memory limit (GOMEMLIMIT) only as much is
// faulted in as the limit leaves room for beside what the runtime holds and what is already ahead.
// Stop-the-world waits in the bench with 1,024 MiB reserved: 41–328 µs in seven 20 s runs (before:
// 66 µs, 82 µs and 33.6 ms in three).
//
// The periodic pass runs at the lowest priority. Its system calls keep a thread in the kernel for
// seconds a pass where the host backs what is faulted in (a traced 20 s run of the index bench: top-ups
// of 128–168 MiB took 0.8–2.1 s), beside the threads running Go code. On a machine with as many CPUs
// as the runtime has Ps the kernel then shares the CPUs among more threads than it has, and a reader
// of the index waits out the pass's time slices. A one-off probe on the 2-vCPU guest (C: two threads
// spinning on the clock and counting gaps, a third faulting in 2 MiB pages with MADV_POPULATE_WRITE),
// gaps over 1 ms per spinning thread in 5 s: 1–16 with nothing faulting, 378–535 with the third thread
// at normal priority, 7–19 with it under SCHED_IDLE. So Keep's goroutine locks its thread and puts it
// under SCHED_IDLE; it never unlocks it, so the thread ends with the goroutine (a thread without
// CAP_SYS_NICE cannot leave SCHED_IDLE, and must not go back to the runtime's pool). The main thread
// is the exception, as the runtime parks it rather than ending it: a goroutine that finds itself there
// holds it while it starts its successor, which so runs on another thread (TestKeepLeavesMainThread;
// before, about one run in a hundred left the main thread SCHED_IDLE for good). Each
// MADV_POPULATE_WRITE faults in one huge page: a call holds the mmap lock for reading, and the
// runtime's next mapping of heap waits for it, so a starved call holds that up for one fault at most.
// The cost: while other threads keep every CPU busy the pass hardly runs (47–56 huge pages in those 5
// s), and the runtime faults its pages in itself, as it would without a budget. Reserve faults in at
// its caller's priority.
//
// The heap's mappings are found in /proc/self/maps as the run of adjacent anonymous private mappings
// around the reservation's address: the runtime grows its arenas contiguously from a base it picks, and
// nothing else (thread stacks, the C heap) is advised, since a huge page under a sparse region costs up to
// 2 MiB of memory for a few KiB used.
//
// # Concurrency model
//
// Reserve and Advise are called from one goroutine at a time (the caller's, or Keep's). Keep starts one
// tracked goroutine ("hugepage.advise"), stopped by Stop.
//
// # Ownership
//
// A Heap owns the set of mappings it advised; the mappings themselves are the runtime's.
package hugepage
