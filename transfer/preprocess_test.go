package transfer

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvroute/kvroute/mm"
)

func fixtureDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "models", "Qwen3-VL-2B-Instruct")
}

// TestLayoutHandComputed checks pixel_values against values computed by hand from the Qwen2-VL
// reshape/transpose: a 8×4 (H×W) image, patch 2, merge 2, temporal 2, no resize (already a multiple
// of 4 within bounds), mean 0 and std 1 so a value is level/255. Pixel (y, x) has R = 10*y + x,
// G = 100 + R, B = 200 - R.
func TestLayoutHandComputed(t *testing.T) {
	p := Processor{PatchSize: 2, MergeSize: 2, TemporalPatchSize: 2, MinPixels: 16, MaxPixels: 1 << 20,
		Mean: [3]float32{0, 0, 0}, Std: [3]float32{1, 1, 1}}
	const W, H = 4, 8
	rgb := make([]byte, W*H*3)
	for y := range H {
		for x := range W {
			r := 10*y + x
			rgb[(y*W+x)*3], rgb[(y*W+x)*3+1], rgb[(y*W+x)*3+2] = byte(r), byte(100+r), byte(200-r)
		}
	}
	tn, err := p.PreprocessRGB(rgb, W, H, 7)
	if err != nil {
		t.Fatal(err)
	}
	// grid_h = 8/2 = 4, grid_w = 4/2 = 2 → 8 patches; cols = 3 channels × 2 frames × 2 × 2 = 24.
	if tn.Rows != 8 || tn.Cols != 24 || tn.GridTHW != [3]int{1, 4, 2} || tn.Hash != 7 {
		t.Fatalf("shape %d×%d grid %v hash %v", tn.Rows, tn.Cols, tn.GridTHW, tn.Hash)
	}
	at := func(r, c int) float32 { return tn.Data[r*tn.Cols+c] }
	lv := func(v int) float32 { return float32(float64(v) * (1.0 / 255.0)) }
	tests := []struct {
		name     string
		row, col int
		want     float32
	}{
		// Row 0 = merge block (0,0), sub-patch (0,0) = patch (0,0); col 0 = R, frame 0, (py 0, px 0): pixel (0,0).
		{"r0c0", 0, 0, lv(0)},
		// col 3 = R, frame 0, (1,1): pixel (1,1) → R = 11.
		{"r0c3", 0, 3, lv(11)},
		// col 4..7 = R, frame 1 (the duplicated frame): col 7 is pixel (1,1) again.
		{"r0c7-dup", 0, 7, lv(11)},
		// col 8 = G, frame 0, (0,0).
		{"r0c8-G", 0, 8, lv(100)},
		// col 17 = B, frame 0, (0,1): pixel (0,1) → B = 199.
		{"r0c17-B", 0, 17, lv(199)},
		// Row 1 = sub-patch (0,1) of block (0,0) = patch (0,1), pixels x 2..3: col 1 = (0,1) → pixel (0,3).
		{"r1c1", 1, 1, lv(3)},
		// Row 2 = sub-patch (1,0) = patch (1,0), pixels y 2..3: col 2 = (1,0) → pixel (3,0) → 30.
		{"r2c2", 2, 2, lv(30)},
		// Row 4 = block (1,0) sub (0,0) = patch (2,0): y 4..5; col 0 → pixel (4,0) = 40.
		{"r4c0", 4, 0, lv(40)},
		// Row 7 = block (1,0) sub (1,1) = patch (3,1): y 6..7, x 2..3; col 3 → pixel (7,3) = 73.
		{"r7c3", 7, 3, lv(73)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := at(tc.row, tc.col); got != tc.want {
				t.Fatalf("pixel_values[%d][%d] = %v, want %v", tc.row, tc.col, got, tc.want)
			}
		})
	}
}

// TestQwen3FixtureShapes: 1920×1080 with the Qwen3-VL-2B fixture resizes to 1920×1088 (68×120 patches of
// 16), 8160 rows of 3·2·16·16 = 1536, and rows/merge² equals the token count the router uses.
func TestQwen3FixtureShapes(t *testing.T) {
	p, err := LoadProcessor(fixtureDir())
	if err != nil {
		t.Fatal(err)
	}
	if p != Qwen3VLProcessor() {
		t.Fatalf("fixture processor %+v, want %+v", p, Qwen3VLProcessor())
	}
	cfg, err := mm.LoadProcessorConfig(fixtureDir())
	if err != nil {
		t.Fatal(err)
	}
	sizes := []struct{ w, h, rows, gh, gw int }{
		{1920, 1080, 8160, 68, 120},
		{640, 480, 1200, 30, 40},
		{100, 100, 256, 16, 16}, // below min_pixels 65536: scaled up to 256×256
	}
	for _, sz := range sizes {
		rgb := make([]byte, sz.w*sz.h*3)
		for i := range rgb {
			rgb[i] = byte(i * 7)
		}
		tn, err := p.PreprocessRGB(rgb, sz.w, sz.h, 1)
		if err != nil {
			t.Fatal(err)
		}
		if tn.Rows != sz.rows || tn.Cols != 1536 || tn.GridTHW != [3]int{1, sz.gh, sz.gw} {
			t.Fatalf("%d×%d: %d×%d grid %v", sz.w, sz.h, tn.Rows, tn.Cols, tn.GridTHW)
		}
		if n := mm.CalculateNumTokens(uint32(sz.w), uint32(sz.h), mm.FamilyQwen3VL, cfg); n != tn.Rows/4 {
			t.Fatalf("%d×%d: %d tokens, %d rows", sz.w, sz.h, n, tn.Rows)
		}
		for _, v := range tn.Data[:4096] {
			if v < -1 || v > 1 || math.IsNaN(float64(v)) {
				t.Fatalf("value %v outside [-1, 1] with mean = std = 0.5", v)
			}
		}
	}
}

// TestDecodeFormats: the same 64×64 opaque image as PNG, GIF and (lossy) JPEG gives the same shape;
// PNG and GIF (exact palette colours) give identical tensors.
func TestDecodeFormats(t *testing.T) {
	img := image.NewPaletted(image.Rect(0, 0, 300, 260), color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}, color.RGBA{0, 255, 0, 255}})
	for i := range img.Pix {
		img.Pix[i] = byte((i / 7) % 3)
	}
	var pngB, gifB, jpgB bytes.Buffer
	if err := png.Encode(&pngB, img); err != nil {
		t.Fatal(err)
	}
	if err := gif.Encode(&gifB, img, nil); err != nil {
		t.Fatal(err)
	}
	if err := jpeg.Encode(&jpgB, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	p := Qwen3VLProcessor()
	var ref Tensor
	for i, data := range [][]byte{pngB.Bytes(), gifB.Bytes(), jpgB.Bytes()} {
		tn, err := p.Preprocess(data, 1)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			ref = tn
			continue
		}
		if tn.Rows != ref.Rows || tn.Cols != ref.Cols {
			t.Fatalf("format %d: shape %d×%d, png %d×%d", i, tn.Rows, tn.Cols, ref.Rows, ref.Cols)
		}
		if i == 1 && !equalF32(tn.Data, ref.Data) {
			t.Fatal("gif and png of the same pixels differ")
		}
	}
	if _, err := p.Preprocess([]byte("not an image"), 1); err == nil {
		t.Fatal("garbage decoded")
	}
}

// TestOverWhite: expected values are Pillow 9.4 alpha_composite(white, RGBA).convert("RGB").
func TestOverWhite(t *testing.T) {
	tests := []struct{ v, a, want uint8 }{{0, 0, 255}, {0, 255, 0}, {100, 255, 100}, {0, 128, 127}, {200, 51, 244}, {37, 200, 84}, {10, 254, 11}, {255, 1, 255}}
	for _, tc := range tests {
		if got := overWhite(tc.v, tc.a); got != tc.want {
			t.Errorf("overWhite(%d, %d) = %d, want %d", tc.v, tc.a, got, tc.want)
		}
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMatchesHFSlowProcessor: values of pixel_values computed by HF's slow Qwen2-VL processor steps in
// numpy (Pillow 9.4 BICUBIC resize of a 50×37 pattern to smart_resize's 224×320, float64 rescale cast to
// float32, float32 normalise with mean = std = 0.5, tile to 2 frames, reshape (1, 2, 3, 7, 2, 16, 10, 2,
// 16), transpose (0, 3, 6, 4, 7, 2, 1, 5, 8)). Exact equality: same bytes after resize, same float32
// arithmetic after.
func TestMatchesHFSlowProcessor(t *testing.T) {
	const W, H = 50, 37
	rgb := make([]byte, W*H*3)
	for y := range H {
		for x := range W {
			o := (y*W + x) * 3
			rgb[o] = byte((x*37 + y*11) % 256)
			rgb[o+1] = byte((x*x*5 + y*29) % 256)
			rgb[o+2] = byte(((255-x*19+y*y*3)%256 + 256) % 256)
		}
	}
	tn, err := Qwen3VLProcessor().PreprocessRGB(rgb, W, H, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tn.Rows != 280 || tn.Cols != 1536 || tn.GridTHW != [3]int{1, 14, 20} {
		t.Fatalf("shape %d×%d grid %v, want 280×1536 [1 14 20]", tn.Rows, tn.Cols, tn.GridTHW)
	}
	want := []struct {
		r, c int
		v    float64
	}{{0, 0, -1.0}, {0, 255, -0.26274508237838745}, {0, 256, -1.0}, {0, 700, -0.5921568870544434},
		{1, 3, -0.270588219165802}, {17, 1535, -0.529411792755127}, {100, 800, -0.18431371450424194},
		{279, 1000, -0.41960781812667847}, {279, 1535, 0.043137311935424805}}
	for _, w := range want {
		if got := tn.Data[w.r*tn.Cols+w.c]; got != float32(w.v) {
			t.Errorf("[%d][%d] = %v, want %v", w.r, w.c, got, float32(w.v))
		}
	}
	var sum float64
	for _, v := range tn.Data {
		sum += float64(v)
	}
	if math.Abs(sum-(-542.7843561172485)) > 1e-6 {
		t.Errorf("sum %v, want -542.7843561172485", sum)
	}
}

// TestToRGBFastPaths: the per-type fast paths give the generic conversion's bytes, for opaque and
// translucent pixels and a sub-image with a non-zero origin.
func TestToRGBFastPaths(t *testing.T) {
	nrgba := image.NewNRGBA(image.Rect(0, 0, 17, 11))
	rgba := image.NewRGBA(image.Rect(0, 0, 17, 11))
	gray := image.NewGray(image.Rect(0, 0, 17, 11))
	for i := range nrgba.Pix {
		nrgba.Pix[i] = byte(i * 37)
		rgba.Pix[i] = byte(i * 53)
	}
	for i := 3; i < len(rgba.Pix); i += 4 {
		rgba.Pix[i] = max(rgba.Pix[i], rgba.Pix[i-1], rgba.Pix[i-2], rgba.Pix[i-3]) // valid premultiplied
		if i%3 == 0 {
			rgba.Pix[i], nrgba.Pix[i] = 255, 255
		}
	}
	for i := range gray.Pix {
		gray.Pix[i] = byte(i * 11)
	}
	ycc := image.NewYCbCr(image.Rect(0, 0, 17, 11), image.YCbCrSubsampleRatio420)
	for i := range ycc.Y {
		ycc.Y[i] = byte(i * 13)
	}
	for i := range ycc.Cb {
		ycc.Cb[i], ycc.Cr[i] = byte(i*29), byte(i*31)
	}
	imgs := map[string]image.Image{
		"nrgba": nrgba, "rgba": rgba, "gray": gray, "ycbcr": ycc,
		"nrgba-sub": nrgba.SubImage(image.Rect(3, 2, 15, 9)), "ycbcr-sub": ycc.SubImage(image.Rect(3, 2, 15, 9)),
	}
	for name, img := range imgs {
		got, w, h := toRGB(img)
		want := make([]byte, w*h*3)
		toRGBGeneric(img, want)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: fast path differs from the generic conversion", name)
		}
	}
}

// A PNG whose IHDR declares 8192×8192 and whose IDAT holds 1 KiB of zeros is refused from its header
// and size (mm.DecodableSize) before Go's decoder allocates the declared 256 MiB image.
func TestPreprocessRefusesPNGBomb(t *testing.T) {
	chunk := func(b []byte, typ string, data []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		c := append([]byte(typ), data...)
		return binary.BigEndian.AppendUint32(append(b, c...), crc32.ChecksumIEEE(c))
	}
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8192), 8192)
	ihdr = append(ihdr, 8, 6, 0, 0, 0)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 1<<10))
	zw.Close()
	bomb := chunk(chunk(chunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", ihdr), "IDAT", z.Bytes()), "IEND", nil)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := Qwen3VLProcessor().Preprocess(bomb, 1)
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, ErrDecode) {
		t.Fatalf("%d-byte 8192x8192 png: %v", len(bomb), err)
	}
	if n := m1.TotalAlloc - m0.TotalAlloc; n > 1<<20 {
		t.Fatalf("refusing it allocated %d bytes", n)
	}
}
