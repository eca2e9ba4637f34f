package bench

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
)

func TestHistQuantile(t *testing.T) {
	buckets := []float64{0, 1, 2, 4, 1e301}
	tests := []struct {
		name   string
		counts []uint64
		p      float64
		want   float64
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0.99, 0},
		{"all in the first bucket", []uint64{10, 0, 0, 0}, 0.99, 1},
		{"tail in the third", []uint64{98, 1, 1, 0}, 0.99, 4},
		{"p99 below the tail", []uint64{990, 9, 1, 0}, 0.99, 2},
		{"unbounded last bucket reports its lower bound", []uint64{0, 0, 0, 5}, 0.5, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := histQuantile(tc.counts, buckets, tc.p); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRuntimeSinceCountsGC forces two collections between snapshots and expects to see them.
func TestRuntimeSinceCountsGC(t *testing.T) {
	a := readRuntime()
	runtime.GC()
	runtime.GC()
	r := readRuntime().since(a)
	if r.GCCycles < 2 || r.GCPauseMicros <= 0 || r.GCPauseMaxMicros <= 0 || r.GCStopMaxMicros <= 0 || r.GCStopMaxMicros > r.GCPauseMaxMicros {
		t.Fatalf("%+v", r)
	}
}

// TestRuntimeSinceCountsPageFaults touches 64 MiB of fresh anonymous memory between snapshots (mapped
// here, not taken from the heap, which may hold pages it has already faulted in): at least a fault per
// 2 MiB page, one per 4 KiB page unless the kernel backs the mapping with huge pages.
func TestRuntimeSinceCountsPageFaults(t *testing.T) {
	buf, err := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	a := readRuntime()
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	if r := readRuntime().since(a); r.PageFaults < 16 {
		t.Fatalf("%d page faults for 64 MiB of fresh memory", r.PageFaults)
	}
}

func TestInterruptCount(t *testing.T) {
	proc := []byte(`            CPU0       CPU1
  0:         40          0   IO-APIC   2-edge      timer
LOC:    7138463    7028402   Local timer interrupts
TLB:   11513790   11457840   TLB shootdowns
`)
	if got, want := interruptCount(proc, "TLB:"), int64(11513790+11457840); got != want {
		t.Fatalf("TLB: got %d, want %d", got, want)
	}
	if got := interruptCount(proc, "CAL:"); got != -1 {
		t.Fatalf("a missing line: got %d, want -1", got)
	}
	if got := interruptCount(proc, "0:"); got != 40 {
		t.Fatalf("a numbered line: got %d, want 40", got)
	}
}

func TestRollupBytes(t *testing.T) {
	rollup := []byte(`556be1727000-7ffc88501000 ---p 00000000 00:00 0                          [rollup]
Rss:                1724 kB
Anonymous:           112 kB
AnonHugePages:      4096 kB
`)
	if got := rollupBytes(rollup, "Anonymous:"); got != 112<<10 {
		t.Fatalf("Anonymous: got %d, want %d", got, 112<<10)
	}
	if got := rollupBytes(rollup, "AnonHugePages:"); got != 4<<20 {
		t.Fatalf("AnonHugePages: got %d, want %d", got, 4<<20)
	}
	if got := rollupBytes(rollup, "Swap:"); got != -1 {
		t.Fatalf("a missing line: got %d, want -1", got)
	}
	if got := rollupBytes([]byte("Anonymous: lots kB\n"), "Anonymous:"); got != -1 {
		t.Fatalf("a malformed figure: got %d, want -1", got)
	}
}

// TestAnonMemorySeesTouchedMemory touches 16 MiB of fresh anonymous memory between two reads: the
// process's anonymous resident memory grows by about that much, and what is in huge pages never exceeds
// it. The runtime may hand memory back between the reads, so three tries, each on a fresh mapping.
func TestAnonMemorySeesTouchedMemory(t *testing.T) {
	if a, _ := anonMemory(); a < 0 {
		t.Skip("no /proc/self/smaps_rollup")
	}
	var seen []string
	for range 3 {
		a0, h0 := anonMemory()
		buf, err := syscall.Mmap(-1, 0, 16<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		a1, h1 := anonMemory()
		syscall.Munmap(buf)
		if h0 > a0 || h1 > a1 || h1 < 0 {
			t.Fatalf("anonymous %d → %d bytes, in huge pages %d → %d", a0, a1, h0, h1)
		}
		if a1-a0 >= 12<<20 {
			return
		}
		seen = append(seen, fmt.Sprintf("%d → %d", a0, a1))
	}
	t.Fatalf("anonymous bytes after touching 16 MiB, three tries: %v", seen)
}
