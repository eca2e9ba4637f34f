package transfer

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// benchJPEG is a w×h JPEG (quality 90) with smooth gradients and some texture, like a photo's cost.
func benchJPEG(b *testing.B, w, h int) []byte {
	b.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x*y + x*7) % 251), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkPreprocess: one op = decode a 1920×1080 JPEG, resize to 1920×1088 (Qwen3-VL smart_resize),
// normalise and lay out pixel_values [8160, 1536] float32 (50 MB).
func BenchmarkPreprocess(b *testing.B) {
	data := benchJPEG(b, 1920, 1080)
	p := Qwen3VLProcessor()
	b.Run("img=1920x1080-jpeg", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var rows int
		for b.Loop() {
			t, err := p.Preprocess(data, 1)
			if err != nil {
				b.Fatal(err)
			}
			rows = t.Rows
		}
		b.ReportMetric(float64(rows), "rows")
	})
}

// handoffSizes are the tensor sizes of the handoff matrix: rows of 1536 float32 (Qwen3-VL), 64-byte
// header included, and the image whose tensor has about that size (Qwen2-VL min_pixels 3136 so a
// small image is not scaled up).
var handoffSizes = []struct {
	name       string
	rows, w, h int
}{
	{"size=1MiB", 170, 224, 192},  // 170 × 6144 B = 1.00 MiB; the image gives 168 rows
	{"size=8MiB", 1365, 608, 576}, // 1365 × 6144 B = 8.00 MiB (fits one 8 MiB buffer); the image gives 1368
}

// BenchmarkHandoff: one op = one image from "tensor ready in the frontend" to "tensor verified in the
// worker": shm = write segment + open/read/verify + unlink; net = copy into a registered buffer +
// TCP pull over loopback + verify + ack/release; url = the worker re-fetching the image from a local
// HTTP server and preprocessing it itself (what transfer saves).
func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	for _, sz := range handoffSizes {
		tn := testTensor(1, sz.rows)
		b.Run("mode=shm/"+sz.name, func(b *testing.B) {
			dir := b.TempDir()
			if st, err := osStat(DefaultShmDir); err == nil && st {
				dir = DefaultShmDir
			}
			s, err := NewSender(Config{Mode: ModeShm, Processor: Qwen3VLProcessor(), ShmDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := Receiver{ShmDir: dir}
			benchHandoff(b, ctx, s, &r, &tn)
		})
		b.Run("mode=net/"+sz.name, func(b *testing.B) {
			s, err := NewSender(Config{Mode: ModeNet, Processor: Qwen3VLProcessor()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var r Receiver
			benchHandoff(b, ctx, s, &r, &tn)
		})
		b.Run("mode=url/"+sz.name, func(b *testing.B) {
			img := benchJPEG(b, sz.w, sz.h)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "image/jpeg")
				_, _ = w.Write(img)
			}))
			defer srv.Close()
			p := Qwen3VLProcessor()
			p.PatchSize, p.MinPixels = 16, 3136
			b.ReportAllocs()
			b.SetBytes(int64(tn.EncodedLen()))
			for b.Loop() {
				resp, err := http.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Preprocess(data, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchHandoff(b *testing.B, ctx context.Context, s *Sender, r *Receiver, tn *Tensor) {
	b.ReportAllocs()
	b.SetBytes(int64(tn.EncodedLen()))
	for b.Loop() {
		d, release, err := s.PrepareTensor(ctx, tn)
		if err != nil {
			b.Fatal(err)
		}
		got, err := r.Receive(ctx, d)
		if err != nil {
			b.Fatal(err)
		}
		release()
		if got.Rows != tn.Rows { // Receive verified the checksum; the shape is the cheap sanity check
			b.Fatalf("rows %d", got.Rows)
		}
	}
}
