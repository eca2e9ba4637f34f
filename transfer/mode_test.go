package transfer

import (
	"errors"
	"testing"
)

func TestResolveMode(t *testing.T) {
	tests := []struct {
		name string
		flag string
		env  map[string]string
		want Mode
		err  bool
	}{
		{"nothing set: off", "", nil, ModeOff, false},
		{"flag shm", "shm", nil, ModeShm, false},
		{"flag net", "net", nil, ModeNet, false},
		{"flag beats env", "off", map[string]string{EnvMode: "shm"}, ModeOff, false},
		{"kvroute env", "", map[string]string{EnvMode: "NET"}, ModeNet, false},
		{"kvroute env beats dynamo env", "", map[string]string{EnvMode: "shm", EnvDynamoMode: "nixl"}, ModeShm, false},
		{"dynamo env nixl", "", map[string]string{EnvDynamoMode: "nixl"}, ModeNet, false},
		{"disable wins over flag", "shm", map[string]string{EnvDisable: "1"}, ModeOff, false},
		{"disable 0 is not disable", "shm", map[string]string{EnvDisable: "0"}, ModeShm, false},
		{"bad value", "rdma", nil, ModeOff, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveMode(tc.flag, func(k string) string { return tc.env[k] })
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("got %v %v, want %v (err %v)", got, err, tc.want, tc.err)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
		})
	}
}
