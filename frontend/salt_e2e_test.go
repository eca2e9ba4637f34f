package frontend

import (
	"fmt"
	"testing"
)

// TestE2ECacheSaltNamespaces: a salted prompt's blocks match only requests in the same cache namespace,
// and the simulated worker's own prefix cache confirms each prediction (its cached tokens equal the
// predicted overlap). The namespace may come from the body's cache_salt, Dynamo's nvext.cache_salt or
// the X-Tenant-ID header; the last two reach the worker as cache_salt.
func TestE2ECacheSaltNamespaces(t *testing.T) {
	s := startStack(t, stackOpts{workers: 2, speedup: 100})
	prompt := longText("salted", 200)
	send := func(extra, tenant string) reply {
		t.Helper()
		var hdr []string
		if tenant != "" {
			hdr = []string{"X-Tenant-ID", tenant}
		}
		r := s.post(t, "/v1/chat/completions", chatBody(s.name, prompt, extra), hdr...)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		return r
	}
	confirmed := func(name string, r reply) float64 {
		t.Helper()
		cached := r.body["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		var overlap float64
		fmt.Sscan(r.overlap, &overlap)
		if cached != overlap*16 {
			t.Fatalf("%s: worker %s cached %v tokens, router predicted %v blocks", name, r.worker, cached, overlap)
		}
		return overlap
	}
	first := send(`,"cache_salt":"tenant-a"`, "")
	confirmed("first", first)
	s.waitOverlap(t, prompt, first.worker)
	if second := send(`,"cache_salt":"tenant-a"`, ""); second.worker != first.worker || confirmed("same salt", second) == 0 {
		t.Fatalf("same salt: worker %s (first %s), overlap %s", second.worker, first.worker, second.overlap)
	}
	if other := send(`,"cache_salt":"tenant-b"`, ""); confirmed("other salt", other) != 0 {
		t.Fatalf("another namespace was predicted overlap %s", other.overlap)
	}
	if plain := send("", ""); confirmed("unsalted", plain) != 0 {
		t.Fatalf("an unsalted request was predicted overlap %s", plain.overlap)
	}
	if nvext := send(`,"nvext":{"cache_salt":"tenant-a"}`, ""); nvext.worker != first.worker || confirmed("nvext salt", nvext) == 0 {
		t.Fatalf("nvext.cache_salt: worker %s (first %s), overlap %s", nvext.worker, first.worker, nvext.overlap)
	}
	if hdr := send("", "tenant-a"); hdr.worker != first.worker || confirmed("X-Tenant-ID", hdr) == 0 {
		t.Fatalf("X-Tenant-ID: worker %s (first %s), overlap %s", hdr.worker, first.worker, hdr.overlap)
	}
}
