//go:build !linux

package hugepage

// Reserve is Linux-only: elsewhere it returns ErrUnsupported.
func Reserve(n, ahead int) (*Heap, Stats, error) { return nil, Stats{}, ErrUnsupported }

// Advise is Linux-only.
func (h *Heap) Advise() (Stats, error) { return Stats{}, ErrUnsupported }

// Mode is Linux-only.
func Mode() (string, error) { return "", ErrUnsupported }

// Mapped is Linux-only.
func Mapped(n int) (buf []byte, release func(), err error) { return nil, nil, ErrUnsupported }

// AdvisedBytes is Linux-only.
func AdvisedBytes() (int, error) { return 0, ErrUnsupported }

// IsAdvised is Linux-only.
func IsAdvised(addr uintptr) (bool, error) { return false, ErrUnsupported }

// MappedSmall is Linux-only.
func MappedSmall(n int) (buf []byte, release func(), err error) { return nil, nil, ErrUnsupported }

// MemTotal is Linux-only.
func MemTotal() (int, error) { return 0, ErrUnsupported }

// mainThread is Linux-only: elsewhere the pass's thread keeps its priority, so it may be any.
func mainThread() bool { return false }

// idleThread is Linux-only: elsewhere the periodic pass keeps its thread's priority.
func idleThread() error { return ErrUnsupported }
