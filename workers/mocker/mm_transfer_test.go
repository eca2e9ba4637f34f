package mocker

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/transfer"
)

// TestMMKwargsHandoff: image parts carrying a descriptor are read over shm and over the network and
// counted; a released segment and a replayed (refused) net descriptor fall back to the URL, and the
// requests still succeed with the same placeholder count.
func TestMMKwargsHandoff(t *testing.T) {
	w := startTestWorker(t, nil)
	var buf bytes.Buffer
	must(t, png.Encode(&buf, image.NewGray(image.Rect(0, 0, 256, 256))))
	uri := "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
	uuid := "0123456789abcdef" + strings.Repeat("0", 48)

	send := func(desc *transfer.Descriptor) {
		t.Helper()
		part := map[string]any{"type": "image_url", "image_url": map[string]any{"url": uri}, "uuid": uuid}
		if desc != nil {
			part["mm_kwargs"] = desc
		}
		msgs := []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "see"}, part}}}
		status, body := postJSON(t, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1})
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	proc := transfer.Qwen3VLProcessor()
	shm, err := transfer.NewSender(transfer.Config{Mode: transfer.ModeShm, Processor: proc})
	must(t, err)
	defer shm.Close()
	netS, err := transfer.NewSender(transfer.Config{Mode: transfer.ModeNet, Processor: proc})
	must(t, err)
	defer netS.Close()
	ctx := context.Background()

	d, release, err := shm.Prepare(ctx, transfer.Source{URL: uri}, mm.Hash(0x0123456789abcdef))
	must(t, err)
	send(&d) // shm
	release()
	send(&d) // segment gone → fallback_url

	d, release, err = netS.Prepare(ctx, transfer.Source{Data: buf.Bytes()}, mm.Hash(0x0123456789abcdef))
	must(t, err)
	send(&d) // net
	send(&d) // token used → refused → fallback_url
	release()
	send(nil) // no descriptor: not counted

	_, m := getBody(t, w.URL()+"/metrics")
	for _, want := range []string{`path="shm"} 1`, `path="net"} 1`, `path="fallback_url"} 2`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(m), "mm_kwargs"))
		}
	}
	if shm.Live() != 0 || netS.Live() != 0 {
		t.Fatalf("items left: shm %d net %d", shm.Live(), netS.Live())
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
