package transfer

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
)

// TestAgentConnectionBound: peers that connect and say nothing hold at most MaxConns connections; one
// more is closed at once and counted, and once a silent peer leaves, a worker's pull is served.
func TestAgentConnectionBound(t *testing.T) {
	a, err := NewAgent(AgentConfig{Buffers: 2, BufferSize: 1 << 20, MaxConns: 2, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", a.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	testutil.Eventually(t, "both silent peers accepted", func() bool { return a.connStats.Open() == 2 })
	over, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(testutil.DefaultWait))
	if n, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("third connection: read %d, %v; want it closed (EOF)", n, err)
	}
	if st := a.Stats(); st.ConnsRefused != 1 || st.AcceptErrors != 0 {
		t.Fatalf("stats %+v: want 1 connection refused, no accept error", st)
	}

	_ = silent[0].Close()
	testutil.Eventually(t, "the silent peer's connection closed", func() bool { return a.connStats.Open() == 1 })
	tn := testTensor(1, 16)
	d := registerNet(t, a, &tn)
	got, err := (&Receiver{DialTimeout: time.Second}).Receive(context.Background(), d)
	if err != nil {
		t.Fatalf("pull under the bound: %v", err)
	}
	if got.Checksum() != tn.Checksum() {
		t.Fatal("pulled tensor differs")
	}
}
