package transfer

import (
	"context"
	"strings"
	"testing"
)

// TestAdvertiseAddr: net-mode descriptors carry AgentConfig.AdvertiseAddr (--mm-transfer-advertise), the
// address workers on other hosts dial, instead of the agent's loopback listen address.
func TestAdvertiseAddr(t *testing.T) {
	for _, tc := range []struct{ advertise, want string }{
		{"", "127.0.0.1:"},
		{"frontend-0.kvroute:7400", "frontend-0.kvroute:7400"},
	} {
		s, err := NewSender(Config{Mode: ModeNet, Processor: Qwen3VLProcessor(),
			Agent: AgentConfig{Buffers: 2, BufferSize: 1 << 20, AdvertiseAddr: tc.advertise}})
		if err != nil {
			t.Fatal(err)
		}
		tn := testTensor(3, 16)
		d, release, err := s.PrepareTensor(context.Background(), &tn)
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		if !strings.HasPrefix(d.Addr, tc.want) || (tc.advertise != "" && d.Addr != tc.want) {
			t.Errorf("advertise %q: descriptor addr %q, want %q", tc.advertise, d.Addr, tc.want)
		}
		release()
		s.Close()
	}
}
