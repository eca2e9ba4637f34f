package transfer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
)

// DefaultShmDir is where POSIX shared-memory segments live on Linux (shm_open names map to files here).
const DefaultShmDir = "/dev/shm"

const shmPrefix = "kvroute_mm_"

// shmName is "kvroute_mm_<pid>_<12 hex digits>": the pid lets the janitor of any process tell whether
// the segment's owner is still alive; the random suffix makes names unguessable and unique.
func shmName(pid int) (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return shmPrefix + strconv.Itoa(pid) + "_" + hex.EncodeToString(b[:]), nil
}

// writeShm creates a new segment in dir holding t's encoded item and returns its name and checksum.
// The segment is created exclusively with mode 0600 (readable by the same user, as Python's
// SharedMemory) and written in full before its name is published.
func writeShm(dir string, t *Tensor) (string, uint64, error) {
	name, err := shmName(os.Getpid())
	if err != nil {
		return "", 0, err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, fmt.Errorf("%w: create segment: %v", ErrUnavailable, err)
	}
	var hdr [headerSize]byte
	payload := t.Bytes()
	sum := t.Checksum()
	t.encodeHeader(hdr[:], sum)
	_, err = f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(payload)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", 0, fmt.Errorf("%w: write segment: %v", ErrUnavailable, err)
	}
	return name, sum, nil
}

// unlinkShm removes a segment; a segment already gone (janitor) is not an error.
func unlinkShm(dir, name string) {
	// Any other error leaves the segment to the janitor (by age, or by pid once this process is gone).
	_ = os.Remove(filepath.Join(dir, name))
}

// readShm reads and verifies the segment named by d. The worker never unlinks (the sender owns it).
func readShm(dir string, d *Descriptor) (Tensor, error) {
	f, err := os.Open(filepath.Join(dir, d.Name))
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: open segment: %v", ErrUnavailable, err)
	}
	defer f.Close()
	return readItem(f, d)
}

// JanitorConfig configures SweepShm.
type JanitorConfig struct {
	// Dir is the shm directory. Default DefaultShmDir.
	Dir string
	// TTL: a segment older than this is removed even if its owner lives (a leak: a release that never
	// ran). Default 10 min, far above any request's life so a live request never loses its segment.
	TTL time.Duration
	// Clock is the clock of the TTL; nil means the wall clock. Tests pass a fake one.
	Clock clock.Clock
	// Alive reports whether a pid is a running process (default: kill(pid, 0) is not ESRCH).
	Alive func(pid int) bool
}

// SweepShm removes kvroute segments in cfg.Dir whose owner process is dead or that are older than the TTL,
// and returns how many it removed. It runs at sender start (crash recovery of a previous incarnation) and
// periodically from the Sender's janitor goroutine; any process may run it.
func SweepShm(cfg JanitorConfig) (int, error) {
	if cfg.Dir == "" {
		cfg.Dir = DefaultShmDir
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Minute
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Alive == nil {
		cfg.Alive = pidAlive
	}
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return 0, fmt.Errorf("transfer: janitor: %w", err)
	}
	now := cfg.Clock.Now()
	removed := 0
	for _, e := range entries {
		m := shmNameRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		stale := !cfg.Alive(pid)
		if !stale {
			info, err := e.Info()
			if err != nil {
				continue
			}
			stale = now.Sub(info.ModTime()) > cfg.TTL
		}
		if stale && os.Remove(filepath.Join(cfg.Dir, e.Name())) == nil {
			removed++
		}
	}
	return removed, nil
}

// pidAlive: signal 0 checks existence; EPERM means it exists under another user.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
