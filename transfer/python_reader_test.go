package transfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// systemPython is the interpreter the reference reader is tested with: the distribution's python3 and
// its Debian packages (python3-xxhash, installed by `make python-deps`), no PyPI.
func systemPython(t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no system python3")
	}
	if err := exec.Command(py, "-c", "import xxhash").Run(); err != nil {
		t.Skip("python3-xxhash missing: run make python-deps")
	}
	return py
}

// runReader feeds a descriptor to scripts/mm_kwargs_reader.py and decodes its summary.
func runReader(t *testing.T, py, shmDir string, d Descriptor) map[string]any {
	t.Helper()
	in, _ := json.Marshal(d)
	cmd := exec.Command(py, "../scripts/mm_kwargs_reader.py", shmDir)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	var res map[string]any
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("reader output %q: %v (exit %v)", out, jerr, err)
	}
	return res
}

// TestPythonReader: the Python reference reader reads what the frontend's Sender hands over — a
// Qwen3-VL preprocessed PNG, over shared memory and pulled from the transfer agent — and returns the
// same pixel_values (sha256 of the payload), shape, grid and mm_hash, the checksum verified; a released
// segment, a used token and a forged descriptor are refused, which means "use the URL".
func TestPythonReader(t *testing.T) {
	py := systemPython(t)
	img := image.NewRGBA(image.Rect(0, 0, 96, 64))
	for y := 0; y < 64; y++ {
		for x := 0; x < 96; x++ {
			img.Set(x, y, color.RGBA{R: uint8(3 * x), G: uint8(4 * y), B: 99, A: 255})
		}
	}
	var pngBytes bytes.Buffer
	if err := png.Encode(&pngBytes, img); err != nil {
		t.Fatal(err)
	}
	dir := shmTestDir(t)
	for _, mode := range []Mode{ModeShm, ModeNet} {
		t.Run(mode.String(), func(t *testing.T) {
			s, err := NewSender(Config{Mode: mode, Processor: Qwen3VLProcessor(), ShmDir: dir, Agent: AgentConfig{Buffers: 2, BufferSize: 1 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const h = 0x0123456789abcdef
			d, release, err := s.Prepare(context.Background(), Source{Data: pngBytes.Bytes()}, h)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Qwen3VLProcessor().Preprocess(pngBytes.Bytes(), h)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(want.Bytes())
			got := runReader(t, py, dir, d)
			if got["error"] != nil || got["sha256"] != hex.EncodeToString(sum[:]) || got["checksum_verified"] != true ||
				got["rows"] != float64(want.Rows) || got["cols"] != float64(want.Cols) || got["mm_hash"] != "0123456789abcdef" ||
				got["first"] != float64(want.Data[0]) {
				t.Fatalf("reader: %v (want %d×%d, first %v)", got, want.Rows, want.Cols, want.Data[0])
			}
			// A corrupted payload fails the checksum.
			if mode == ModeShm {
				path := filepath.Join(dir, d.Name)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)-1] ^= 0x40
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				if res := runReader(t, py, dir, d); res["error"] != "checksum mismatch" {
					t.Fatalf("corrupted segment: %v", res)
				}
			}
			// A net token is good for one pull; a released segment is gone: the reader refuses both.
			if mode == ModeNet {
				if again := runReader(t, py, dir, d); again["error"] == nil {
					t.Fatalf("second pull of one token: %v", again)
				}
			}
			release()
			if after := runReader(t, py, dir, d); after["error"] == nil {
				t.Fatalf("read after release: %v", after)
			}
			forged := d
			forged.Name, forged.Kind = "../../etc/passwd", KindShm
			if res := runReader(t, py, dir, forged); res["error"] == nil {
				t.Fatalf("forged name accepted: %v", res)
			}
		})
	}
}
