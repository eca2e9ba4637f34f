package frontend

import (
	"fmt"
	"testing"
)

// No value of router_config_override, isl or priority gets a 5xx from /v1/route, and a refused request
// books no load: the next route over the same workers sees them all idle.
func TestRouteValidationBeforeCommit(t *testing.T) {
	base, r := startRouterAPI(t, 4, ServerConfig{})
	for id := 1; id <= 4; id++ {
		if code, b := call(t, "POST", base+"/v1/workers", fmt.Sprintf(`{"id":%d,"url":"http://127.0.0.1:%d"}`, id, 9+id)); code != 200 {
			t.Fatalf("register %d: %d %v", id, code, b)
		}
	}
	values := []string{"0", "1", "0.5", "-1", "-0", "1e-320", "5e-324", "1e308", "1.7976931348623157e308", "1e400", "2", "1000", `"1"`, "true", "null", "[]", "{}"}
	fields := []string{"overlap_score_credit", "prefill_load_scale", "router_temperature", "shared_cache_multiplier", "overlap_score_weight", "assume_kv_reuse", "track_prefill_tokens"}
	n := 0
	for _, f := range fields {
		for _, v := range values {
			n++
			body := fmt.Sprintf(`{"request_id":"o%d","tokens":[1,2,3,4,5,6,7,8],"router_config_override":{%q:%s}}`, n, f, v)
			code, b := call(t, "POST", base+"/v1/route", body)
			if code >= 500 {
				t.Errorf("%s=%s: %d %v", f, v, code, b)
			}
			if code == 200 {
				if code, b := call(t, "POST", base+fmt.Sprintf("/v1/route/o%d/free", n), ""); code != 200 {
					t.Fatalf("free: %d %v", code, b)
				}
			}
		}
	}
	for _, tc := range []struct{ name, body string }{
		{"isl past the bound", `{"request_id":"i1","block_hashes":[1],"isl":4611686018427387904}`},
		{"isl just past the bound", fmt.Sprintf(`{"request_id":"i2","block_hashes":[1],"isl":%d}`, maxQueryTokens+1)},
		{"negative isl", `{"request_id":"i3","block_hashes":[1],"isl":-1}`},
		{"isl not an integer", `{"request_id":"i4","block_hashes":[1],"isl":1.5}`},
		{"huge priority", `{"request_id":"i5","block_hashes":[1],"priority":1e308}`},
		{"negative priority", `{"request_id":"i6","block_hashes":[1],"priority":-1}`},
		{"unknown pinned worker", `{"request_id":"i7","block_hashes":[1],"worker_id":99}`},
		{"pinned dp rank the worker does not have", `{"request_id":"i9","block_hashes":[1],"worker_id":1,"dp_rank":5}`},
		{"bad override", `{"request_id":"i8","block_hashes":[1],"router_config_override":{"overlap_score_credit":2}}`},
	} {
		code, b := call(t, "POST", base+"/v1/route", tc.body)
		if code < 400 || code >= 500 {
			t.Errorf("%s: %d %v, want a 4xx", tc.name, code, b)
		}
	}
	// Nothing refused was booked: every worker is idle.
	if n := r.ActiveRequests(); n != 0 {
		t.Fatalf("%d requests booked after refused routes", n)
	}
}
