package transfer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/mm"
)

// The test binary doubles as the second process: with KVROUTE_TRANSFER_HELPER set, TestMain runs a
// helper role instead of the tests.
//
//	sender:   NewSender(mode from KVROUTE_TRANSFER_MODE, dir from KVROUTE_TRANSFER_DIR); for each stdin
//	          line "prepare <seed>" it prints the descriptor JSON; "release <n>" releases the n-th;
//	          "exit" closes. A parent may SIGKILL it at any point.
//	receiver: for each stdin line (a descriptor JSON) it prints "ok <checksum>" or "err <class>".
const helperEnv = "KVROUTE_TRANSFER_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "sender":
		os.Exit(helperSender())
	case "receiver":
		os.Exit(helperReceiver())
	}
	os.Exit(2)
}

// registerNet registers tn with agent a and returns the descriptor a worker pulls it by.
func registerNet(t *testing.T, a *Agent, tn *Tensor) Descriptor {
	t.Helper()
	var sum uint64
	id, tok, _, err := a.Register(tn.EncodedLen(), func(b []byte) { sum = tn.EncodeTo(b) })
	if err != nil {
		t.Fatal(err)
	}
	d := newDescriptor(KindNet, tn, sum)
	d.Addr, d.Buffer, d.Token = a.Addr(), id, tok
	return d
}

// testTensor is a small deterministic tensor: rows×1536 with values from seed.
func testTensor(seed, rows int) Tensor {
	t := Tensor{Rows: rows, Cols: 1536, GridTHW: [3]int{1, 2, rows / 2}, Hash: mm.Hash(seed*7919 + 1)}
	t.Data = make([]float32, rows*1536)
	for i := range t.Data {
		t.Data[i] = float32((i*31+seed)%509) / 509
	}
	return t
}

func helperSender() int {
	mode, err := ParseMode(os.Getenv("KVROUTE_TRANSFER_MODE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := NewSender(Config{Mode: mode, Processor: Qwen3VLProcessor(), ShmDir: os.Getenv("KVROUTE_TRANSFER_DIR")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	var releases []func()
	sc := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "prepare":
			var seed int
			fmt.Sscan(f[1], &seed)
			tn := testTensor(seed, 64)
			d, rel, err := s.PrepareTensor(context.Background(), &tn)
			if err != nil {
				fmt.Fprintln(out, "err", err)
			} else {
				releases = append(releases, rel)
				b, _ := json.Marshal(d)
				fmt.Fprintln(out, string(b))
			}
		case "release":
			var n int
			fmt.Sscan(f[1], &n)
			releases[n]()
			fmt.Fprintln(out, "released")
		case "exit":
			return 0
		}
		out.Flush()
	}
	return 0
}

func helperReceiver() int {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	r := Receiver{ShmDir: os.Getenv("KVROUTE_TRANSFER_DIR"), DialTimeout: time.Second}
	for sc.Scan() {
		var d Descriptor
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			fmt.Println("err json")
			continue
		}
		t, err := r.Receive(context.Background(), d)
		if err != nil {
			fmt.Println("err", errClass(err))
			continue
		}
		fmt.Printf("ok %016x\n", t.Checksum())
	}
	return 0
}

func errClass(err error) string {
	for _, c := range []error{ErrUnavailable, ErrRefused, ErrCorrupt, ErrBadDescriptor} {
		if errors.Is(err, c) {
			return strings.TrimPrefix(c.Error(), "transfer: ")
		}
	}
	return "other"
}

// helper is a running helper process with line-oriented stdin/stdout.
type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(t *testing.T, role string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	h.out.Buffer(make([]byte, 64<<10), 1<<20)
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

// call sends one line and returns the reply line.
func (h *helper) call(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(h.in, line); err != nil {
		t.Fatal(err)
	}
	if !h.out.Scan() {
		t.Fatalf("helper gave no reply to %q: %v", line, h.out.Err())
	}
	return h.out.Text()
}

// kill ends the helper with SIGKILL (no cleanup runs) and reaps it.
func (h *helper) kill() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// shmTestDir is a fresh directory on the shm tmpfs when there is one (the real medium), else a temp dir.
func shmTestDir(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat(DefaultShmDir); err == nil && st.IsDir() {
		d, err := os.MkdirTemp(DefaultShmDir, "kvroute-test-")
		if err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// segments lists the kvroute segments in dir.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if shmNameRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func osStat(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return st.IsDir(), nil
}
