package registry

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Spec
		wantErr bool
	}{
		{name: "full", in: "id=1,url=http://127.0.0.1:8001,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,dp_size=2,block_size=16,total_kv_blocks=1000,max_num_batched_tokens=8192,device=cpu,topic=kv@a:1@m",
			want: Spec{ID: 1, URL: "http://127.0.0.1:8001", Events: "tcp://127.0.0.1:5557", Replay: "tcp://127.0.0.1:5558", DPSize: 2, BlockSize: 16, TotalKVBlocks: 1000, MaxNumBatchedTokens: 8192, Device: "cpu", Topic: "kv@a:1@m"}},
		{name: "id only", in: "id=7", want: Spec{ID: 7}},
		{name: "spaces", in: " id = 3 , url = http://h:1 ", want: Spec{ID: 3, URL: "http://h:1"}},
		{name: "missing id", in: "url=http://h:1", wantErr: true},
		{name: "bad id", in: "id=x", wantErr: true},
		{name: "negative id", in: "id=-1", wantErr: true},
		{name: "unknown key", in: "id=1,colour=red", wantErr: true},
		{name: "no equals", in: "id=1,url", wantErr: true},
		{name: "bad url", in: "id=1,url=ftp://h", wantErr: true},
		{name: "bad events", in: "id=1,events=http://h:1", wantErr: true},
		{name: "events without port", in: "id=1,events=tcp://h", wantErr: true},
		{name: "replay without events", in: "id=1,replay=tcp://h:2", wantErr: true},
		{name: "bad device", in: "id=1,device=tpu", wantErr: true},
		{name: "negative block", in: "id=1,block_size=-4", wantErr: true},
		{name: "prefill role", in: "id=2,role=prefill", want: Spec{ID: 2, Role: RolePrefill}},
		{name: "decode role", in: "id=2,role=decode", want: Spec{ID: 2, Role: RoleDecode}},
		{name: "both role", in: "id=2,role=both", want: Spec{ID: 2, Role: RoleBoth}},
		{name: "bad role", in: "id=2,role=encode", wantErr: true},
		{name: "model and key", in: "id=2,model=org/llama,api_key=sk-1", want: Spec{ID: 2, Model: "org/llama", APIKey: "sk-1"}},
		{name: "key env", in: "id=2,api_key_env=PATH", want: Spec{ID: 2, APIKeyEnv: "PATH"}},
		{name: "key env unset", in: "id=2,api_key_env=KVROUTE_UNSET_VARIABLE_X", wantErr: true},
		{name: "key and env", in: "id=2,api_key=a,api_key_env=PATH", wantErr: true},
		{name: "key with control byte", in: "id=2,api_key=a\rb", wantErr: true},
		{name: "legacy mm scheme", in: "id=2,mm_scheme=block_mm_infos", want: Spec{ID: 2, MMScheme: MMSchemeBlockMMInfos}},
		{name: "pad mm scheme", in: "id=2,mm_scheme=pad", want: Spec{ID: 2, MMScheme: "pad"}},
		{name: "bad mm scheme", in: "id=2,mm_scheme=suffix", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadSpec) {
					t.Fatalf("err = %v, want ErrBadSpec", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Key is the inline key, else the variable's value.
func TestKey(t *testing.T) {
	t.Setenv("KVROUTE_TEST_KEY", "sk-env")
	if k := (&Spec{ID: 1, APIKeyEnv: "KVROUTE_TEST_KEY"}).Key(); k != "sk-env" {
		t.Errorf("env key: %q", k)
	}
	if k := (&Spec{ID: 1, APIKey: "sk-inline"}).Key(); k != "sk-inline" {
		t.Errorf("inline key: %q", k)
	}
}

func TestRankEndpoint(t *testing.T) {
	tests := []struct {
		ep   string
		rank int
		want string
		err  bool
	}{
		{"tcp://127.0.0.1:5557", 0, "tcp://127.0.0.1:5557", false},
		{"tcp://127.0.0.1:5557", 2, "tcp://127.0.0.1:5559", false},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558", false},
		{"inproc://kv", 1, "inproc://kv_dp1", false},
		{"ipc:///tmp/kv", 1, "", true},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv", false},
	}
	for _, tc := range tests {
		got, err := RankEndpoint(tc.ep, tc.rank)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("RankEndpoint(%q,%d) = %q,%v", tc.ep, tc.rank, got, err)
		}
	}
}

func TestParseJSON(t *testing.T) {
	sp, err := ParseJSON([]byte(`{"id":3,"url":"http://127.0.0.1:8001","events":"tcp://127.0.0.1:5557","block_size":16}`))
	if err != nil || sp.ID != 3 || sp.BlockSize != 16 {
		t.Fatalf("%+v %v", sp, err)
	}
	if sp, err := ParseJSON([]byte(`{"id":4,"role":"prefill"}`)); err != nil || sp.RoleOf() != RolePrefill {
		t.Fatalf("%+v %v", sp, err)
	}
	if sp, _ := ParseJSON([]byte(`{"id":4}`)); sp.RoleOf() != RoleBoth {
		t.Fatalf("default role %q, want both", sp.RoleOf())
	}
	for _, bad := range []string{`{}`, `{"id":-1}`, `{"id":1,"typo":2}`, `[`, `{"id":1,"device":"x"}`, `{"id":1,"role":"x"}`} {
		if _, err := ParseJSON([]byte(bad)); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

func TestExpandBindEndpoints(t *testing.T) {
	tests := []struct {
		in      []string
		want    []string
		wantErr bool
	}{
		{in: []string{"tcp://*:5557"}, want: []string{"tcp://*:5557"}},
		{in: []string{"tcp://*:5557", "tcp://127.0.0.1:*"}, want: []string{"tcp://*:5557", "tcp://127.0.0.1:*"}},
		{in: []string{"tcp://*:5557-5559"}, want: []string{"tcp://*:5557", "tcp://*:5558", "tcp://*:5559"}},
		{in: []string{"tcp://*:5557,tcp://*:6000"}, want: []string{"tcp://*:5557", "tcp://*:6000"}},
		{in: []string{"tcp://*:5559-5557"}, wantErr: true},
		{in: []string{"tcp://*:1-99999"}, wantErr: true},
		{in: []string{"nonsense"}, wantErr: true},
	}
	for _, tc := range tests {
		got, err := ExpandBindEndpoints(tc.in)
		if (err != nil) != tc.wantErr || !tc.wantErr && strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("ExpandBindEndpoints(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestReplayNeedsEventsOrTopic(t *testing.T) {
	if _, err := Parse("id=1,replay=tcp://127.0.0.1:5558"); err == nil {
		t.Error("replay alone accepted")
	}
	if _, err := Parse("id=1,topic=kv@w,replay=tcp://127.0.0.1:5558,dp_size=2"); err != nil {
		t.Errorf("bound worker with replay refused: %v", err)
	}
	if _, err := Parse("id=1,topic=kv@w,replay=ipc:///tmp/r,dp_size=2"); err == nil {
		t.Error("an ipc replay endpoint cannot be offset for rank 1")
	}
}

func TestWorkerURL(t *testing.T) {
	good := []string{"http://127.0.0.1:8001", "https://worker-3.svc.cluster.local", "http://[::1]:8000", "http://h:1/prefix/v1", "http://w_1:80/"}
	bad := []string{
		"ftp://h", "http://", "http://:8000", "http://h:0", "http://h:65536", "http://h:x", "http://h:",
		"http://user:pw@h:1", "http://h:1/?a=1", "http://h:1/#f", "http://h\xff:1", "http://h\xc3\xa9:1",
		"http://h :1", "http://h\t:1", "http://[::1:1", "http://[zz]:1", "http://h%2f:1", "h:1", "mailto:x@h",
	}
	for _, u := range good {
		if err := (&Spec{ID: 1, URL: u}).Validate(); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
	for _, u := range bad {
		if err := (&Spec{ID: 1, URL: u}).Validate(); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%q accepted: %v", u, err)
		}
	}
}
