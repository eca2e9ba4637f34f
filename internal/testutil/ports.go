package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// PortRange returns a base port such that base..base+n-1 are free now, on every address. A test that
// must name ports before something binds them (a child process, a publisher configured by port) takes
// them below the kernel's ephemeral range (ip_local_port_range): inside it, any outgoing connection or
// bind to port 0 of the test run (ZMQ, HTTP clients, other tests) may take one between the check and the
// bind (a CI run lost a frontend's port that way: "bind: address already in use").
func PortRange(t testing.TB, n int) int {
	t.Helper()
	lo, hi := 20000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if first, err := strconv.Atoi(f[0]); err == nil && first-n > 10000 {
				lo, hi = 10000, first
			}
		}
	}
	for range 200 {
		base := lo + rand.IntN(hi-n-lo)
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}
