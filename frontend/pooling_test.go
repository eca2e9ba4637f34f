package frontend

import (
	"errors"
	"testing"

	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/registry"
)

// Any pooling body decodes or gives a 400/404/413 class, never a panic.
func FuzzDecodePooling(f *testing.F) {
	f.Add(uint8(0), []byte(`{"model":"m","input":["a",[1,2]]}`))
	f.Add(uint8(1), []byte(`{"model":"m","text_1":"a","text_2":["b"]}`))
	f.Add(uint8(2), []byte(`{"model":"m","query":"q","documents":[{"text":"d"}]}`))
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		ep := epEmbeddings + endpoint(kind%3)
		in, err := decodePooling(ep, b, []string{"m"})
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("unclassed error %v", err)
			}
			return
		}
		if in.model != "m" || len(in.texts)+len(in.tokens) == 0 && ep != epEmbeddings {
			t.Fatalf("decoded %+v", in)
		}
	})
}

// A worker re-registered under its URL with another API key gets an endpoint that sends the new key.
func TestWorkerPoolFollowsKey(t *testing.T) {
	p := NewWorkerPool(client.DefaultConfig())
	defer p.Close()
	a, err := p.Get(registry.Spec{ID: 1, URL: "http://127.0.0.1:9", APIKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	same, _ := p.Get(registry.Spec{ID: 1, URL: "http://127.0.0.1:9", APIKey: "k1"})
	b, _ := p.Get(registry.Spec{ID: 1, URL: "http://127.0.0.1:9", APIKey: "k2"})
	if same != a || b == a || b.APIKey() != "k2" {
		t.Errorf("same key: reused %v; new key: new endpoint %v with key %q", same == a, b != a, b.APIKey())
	}
}
