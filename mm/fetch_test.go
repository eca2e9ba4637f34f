package mm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProberFetch(t *testing.T) {
	body := []byte("\x89PNG not really")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()

	guarded, err := NewProber(DefaultProbeConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer guarded.Close()
	if _, err := guarded.Fetch(context.Background(), srv.URL, 0); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("loopback fetch through the guard: %v, want ErrBlockedAddress", err)
	}
	if got, err := guarded.Fetch(context.Background(), "data:image/png;base64,aGk=", 0); err != nil || string(got) != "hi" {
		t.Fatalf("data uri: %q %v", got, err)
	}

	cfg := DefaultProbeConfig()
	cfg.AllowHosts = []string{"127.0.0.1"}
	open, err := NewProber(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	got, err := open.Fetch(context.Background(), srv.URL, 0)
	if err != nil || string(got) != string(body) {
		t.Fatalf("allowed fetch: %q %v", got, err)
	}
	if _, err := open.Fetch(context.Background(), srv.URL, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v, want ErrTooLarge", err)
	}
	if _, err := open.Fetch(context.Background(), "s3://b/k.png", 0); !errors.Is(err, ErrUnsupportedScheme) {
		t.Fatalf("s3: %v", err)
	}
}
