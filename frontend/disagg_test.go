package frontend

import (
	"testing"
)

// TestBypassPolicies is the conditional-prefill decision per policy, at Dynamo's defaults (5000, 16384,
// roomy ratio 0.5) unless a case changes them.
func TestBypassPolicies(t *testing.T) {
	roomy := func() (int, int) { return 1000, 2 }    // 500 prefill tokens per decode worker
	crowded := func() (int, int) { return 40000, 2 } // 20,000 per worker: over 0.5 × 16384
	tests := []struct {
		name   string
		edit   func(*DisaggConfig)
		netNew int
		loads  func() (int, int)
		want   bool
	}{
		{"token_cap below", nil, 4999, crowded, true},
		{"token_cap at below", nil, 5000, roomy, true},
		{"token_cap middle crowded", nil, 10000, crowded, false},
		{"token_cap middle roomy", nil, 10000, roomy, true},
		{"token_cap above", nil, 16384, roomy, false},
		{"token_cap no decode workers", nil, 10000, func() (int, int) { return 0, 0 }, false},
		{"roomy ratio 0", func(c *DisaggConfig) { c.RoomyRatio = 0 }, 10000, roomy, false},
		{"bypass below 100", func(c *DisaggConfig) { c.BypassBelowTokens = 100 }, 4999, crowded, false},
		{"disagg above 8000", func(c *DisaggConfig) { c.DisaggAboveTokens = 8000 }, 10000, roomy, false},
		{"threshold_only middle", func(c *DisaggConfig) { c.BypassPolicy = BypassThresholdOnly }, 10000, roomy, false},
		{"threshold_only below", func(c *DisaggConfig) { c.BypassPolicy = BypassThresholdOnly }, 10, crowded, true},
		{"always", func(c *DisaggConfig) { c.BypassPolicy = BypassAlways }, 100000, crowded, true},
		{"never", func(c *DisaggConfig) { c.BypassPolicy = BypassNever }, 1, roomy, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultDisaggConfig()
			if tc.edit != nil {
				tc.edit(&c)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := c.bypass(tc.netNew, tc.loads); got != tc.want {
				t.Fatalf("bypass(%d) = %v, want %v", tc.netNew, got, tc.want)
			}
		})
	}
}

func TestDisaggConfigValidate(t *testing.T) {
	for _, bad := range []func(*DisaggConfig){
		func(c *DisaggConfig) { c.BypassPolicy = "regression_only" },
		func(c *DisaggConfig) { c.BypassPolicy = "sometimes" },
		func(c *DisaggConfig) { c.BypassBelowTokens = -1 },
		func(c *DisaggConfig) { c.RoomyRatio = -0.5 },
	} {
		c := DefaultDisaggConfig()
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

func TestPrefillBody(t *testing.T) {
	in := `{"model":"m","prompt":"hi","max_tokens":50,"max_completion_tokens":50,"stream":true,"stream_options":{"include_usage":true},"kv_transfer_params":{"x":1}}`
	out, err := prefillBody([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","prompt":"hi","max_tokens":1,"max_completion_tokens":1,"stream":false,"kv_transfer_params":` + string(prefillKVParams) + `}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}
