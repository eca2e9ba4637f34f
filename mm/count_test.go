package mm

import "testing"

// Configs of Dynamo's fixture llm_multimodal_1_7_0_counts.json.
var (
	cfgQwen2  = ProcessorConfig{PatchSize: 14, MergeSize: 2, MinPixels: 3136, MaxPixels: 12845056, TemporalPatchSize: 2}
	cfgQwen3  = ProcessorConfig{PatchSize: 16, MergeSize: 2, TemporalPatchSize: 2, HasSize: true, ShortestEdge: 65536, LongestEdge: 16777216}
	cfgLlava  = ProcessorConfig{PatchSize: 14, HasSize: true, ShortestEdge: 336}
	cfgLlama4 = ProcessorConfig{MaxImageTiles: 16, HasSize: true, SizeHeight: 336, SizeWidth: 336}
	cfgKimi   = mustParse(`{"media_proc_cfg": {"patch_size": 14, "merge_kernel_size": 2, "in_patch_limit": 16384, "patch_limit_on_one_side": 512}}`)
)

func mustParse(s string) ProcessorConfig {
	c, err := ParseProcessorConfig([]byte(s))
	if err != nil {
		panic(err)
	}
	return c
}

// TestGoldenMainTable is every cell of the §7.1 main table: 11 sizes × 6 families (66 values).
func TestGoldenMainTable(t *testing.T) {
	type row struct {
		w, h                                         uint32
		qwen2, qwen3, llava, llavaNext, llama4, kimi int
	}
	rows := []row{
		{64, 64, 4, 64, 576, 1176, 576, 9},
		{100, 100, 16, 64, 576, 1176, 576, 16},
		{337, 511, 216, 176, 576, 2160, 2880, 247},
		{400, 300, 154, 108, 576, 1368, 1728, 165},
		{500, 500, 324, 256, 576, 2928, 2880, 324},
		{600, 300, 231, 171, 576, 1752, 1728, 242},
		{300, 600, 231, 171, 576, 1776, 1728, 242},
		{1000, 100, 144, 93, 576, 1160, 2304, 144},
		{100, 1000, 144, 93, 576, 1224, 2304, 144},
		{1999, 1125, 2840, 2170, 576, 1948, 9216, 2952},
		{4000, 3000, 15301, 11750, 576, 2340, 7488, 4200},
	}
	for _, r := range rows {
		cells := []struct {
			f    Family
			cfg  ProcessorConfig
			want int
		}{
			{FamilyQwen2VL, cfgQwen2, r.qwen2},
			{FamilyQwen3VL, cfgQwen3, r.qwen3},
			{FamilyLlava, cfgLlava, r.llava},
			{FamilyLlavaNext, cfgLlava, r.llavaNext},
			{FamilyLlama4, cfgLlama4, r.llama4},
			{FamilyKimiK25, cfgKimi, r.kimi},
		}
		for _, c := range cells {
			if got := CalculateNumTokens(r.w, r.h, c.f, c.cfg); got != c.want {
				t.Errorf("%s %dx%d = %d, want %d", c.f, r.w, r.h, got, c.want)
			}
		}
	}
}

// TestGoldenEdgeRows is the §7.1 "edge and custom rows" table plus the other unit-test values of §7.1.
func TestGoldenEdgeRows(t *testing.T) {
	tests := []struct {
		name string
		f    Family
		cfg  ProcessorConfig
		w, h uint32
		want int
	}{
		{"qwen2 empty 1x1", FamilyQwen2VL, ProcessorConfig{}, 1, 1, 256},
		{"qwen2 empty 350x350", FamilyQwen2VL, ProcessorConfig{}, 350, 350, 256},
		{"qwen2 empty 1400x1400", FamilyQwen2VL, ProcessorConfig{}, 1400, 1400, 1225},
		{"qwen2 empty 40000x100", FamilyQwen2VL, ProcessorConfig{}, 40000, 100, 1},
		{"qwen2 p16 400x400", FamilyQwen2VL, ProcessorConfig{PatchSize: 16, MergeSize: 2, MinPixels: 65536, MaxPixels: 1048576}, 400, 400, 144},
		{"qwen2 p16 2048x1024", FamilyQwen2VL, ProcessorConfig{PatchSize: 16, MergeSize: 2, MinPixels: 65536, MaxPixels: 1048576}, 2048, 1024, 990},
		{"qwen3 p{16,16} 320x640", FamilyQwen3VL, mustParse(`{"patch_size":{"height":16,"width":16},"merge_size":2,"size":{"shortest_edge":262144,"longest_edge":1048576}}`), 320, 640, 276},
		{"qwen3 p{16,16} 2048x2048", FamilyQwen3VL, mustParse(`{"patch_size":{"height":16,"width":16},"merge_size":2,"size":{"shortest_edge":262144,"longest_edge":1048576}}`), 2048, 2048, 1024},
		{"llava p16 384 640x480", FamilyLlava, mustParse(`{"patch_size":16,"size":{"height":384,"width":384}}`), 640, 480, 576},
		{"llava-next 224 640x480", FamilyLlavaNext, mustParse(`{"size":{"shortest_edge":224}}`), 640, 480, 1048},
		{"llava-next 224 480x640", FamilyLlavaNext, mustParse(`{"size":{"shortest_edge":224}}`), 480, 640, 1056},
		{"llama4 4x448 1000x1000", FamilyLlama4, mustParse(`{"max_image_tiles":4,"size":{"height":448,"width":448}}`), 1000, 1000, 5120},
		{"llama4 4x448 2000x500", FamilyLlama4, mustParse(`{"max_image_tiles":4,"size":{"height":448,"width":448}}`), 2000, 500, 5120},
		{"kimi ignored cfg 600x400", FamilyKimiK25, mustParse(`{"media_proc_cfg":{"patch_size":16,"merge_kernel_size":2,"in_patch_limit":4096,"patch_limit_on_one_side":128}}`), 600, 400, 330},
		{"kimi ignored cfg 4000x3000", FamilyKimiK25, mustParse(`{"media_proc_cfg":{"patch_size":16,"merge_kernel_size":2,"in_patch_limit":4096,"patch_limit_on_one_side":128}}`), 4000, 3000, 4200},
		// Other unit tests (§7.1).
		{"estimator llama4 336 max65 21840x336", FamilyLlama4, ProcessorConfig{MaxImageTiles: 65, HasSize: true, SizeHeight: 336}, 21840, 336, 38016},
		{"estimator qwen2 nested 16/2 400x400", FamilyQwen2VL, mustParse(`{"min_pixels":65536,"media_proc_cfg":{"patch_size":16,"merge_kernel_size":2}}`), 400, 400, 144},
		{"estimator llava nested 16/2", FamilyLlava, mustParse(`{"min_pixels":65536,"media_proc_cfg":{"patch_size":16,"merge_kernel_size":2}}`), 400, 400, 441},
		{"estimator qwen2 top-level 14/2 wins", FamilyQwen2VL, mustParse(`{"patch_size":14,"merge_size":2,"min_pixels":65536,"media_proc_cfg":{"patch_size":16,"merge_kernel_size":2}}`), 400, 400, 196},
		{"crate qwen2 default 1400x1400", FamilyQwen2VL, ProcessorConfig{}, 1400, 1400, 1225},
		{"crate qwen2 max_pixels override 1400x1400", FamilyQwen2VL, ProcessorConfig{MaxPixels: 616 * 616}, 1400, 1400, 484},
		{"crate qwen3 640x480", FamilyQwen3VL, ProcessorConfig{}, 640, 480, 300},
		{"crate qwen2 448x448", FamilyQwen2VL, ProcessorConfig{}, 448, 448, 256},
		{"crate llava 336", FamilyLlava, ProcessorConfig{}, 336, 336, 576},
		{"kimi k2.5 600x400", FamilyKimiK25, ProcessorConfig{}, 600, 400, 330},
		{"phi3 1344x1344", FamilyPhi3Vision, ProcessorConfig{}, 1344, 1344, 2509},
		{"phi3 h1008 w1344", FamilyPhi3Vision, ProcessorConfig{}, 1344, 1008, 1921},
		{"phi3 h1344 w1008", FamilyPhi3Vision, ProcessorConfig{}, 1008, 1344, 1933},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CalculateNumTokens(tc.w, tc.h, tc.f, tc.cfg); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestQwen3FixtureModel counts with the committed Qwen3-VL-2B preprocessor config (Dynamo's
// counter_loads_hf_config_and_counts_known_qwen3_vl_dimensions: 640x480 → 300).
func TestQwen3FixtureModel(t *testing.T) {
	cfg, err := LoadProcessorConfig("../testdata/models/Qwen3-VL-2B-Instruct")
	if err != nil {
		t.Fatal(err)
	}
	if got := CalculateNumTokens(640, 480, FamilyQwen3VL, cfg); got != 300 {
		t.Fatalf("got %d, want 300", got)
	}
}

// TestKimiK3Grid is Dynamo's K3 counter test: 4000x3000 → 143 × 108.
func TestKimiK3Grid(t *testing.T) {
	gw, gh := kimiGrid(4000, 3000, kimiK3Params)
	if gw != 143 || gh != 108 {
		t.Fatalf("grid %dx%d, want 143x108", gw, gh)
	}
	if n := kimiTokens(4000, 3000, kimiK3Params); n != 15444 {
		t.Fatalf("tokens %d, want 15444", n)
	}
}

// TestPhi3Derived is §7.3: the 1.7.0 Phi-3 algorithm on the fixture sizes.
func TestPhi3Derived(t *testing.T) {
	tests := []struct {
		w, h uint32
		want int
	}{
		{64, 64, 2509}, {100, 100, 2509}, {337, 511, 1933}, {400, 300, 1921}, {500, 500, 2509},
		{600, 300, 2353}, {300, 600, 2377}, {1000, 100, 1609}, {100, 1000, 1717}, {1999, 1125, 2353},
		{4000, 3000, 1921},
	}
	for _, tc := range tests {
		if got := CalculateNumTokens(tc.w, tc.h, FamilyPhi3Vision, ProcessorConfig{MaxImageTiles: 4}); got != tc.want {
			t.Errorf("phi3 %dx%d = %d, want %d", tc.w, tc.h, got, tc.want)
		}
	}
}

func TestPixtral(t *testing.T) {
	tests := []struct {
		w, h uint32
		want int
	}{
		{1024, 1024, 64 * 64}, {2048, 1024, 64 * 32}, {100, 100, 7 * 7}, {0, 0, 0},
	}
	for _, tc := range tests {
		if got := CalculateNumTokens(tc.w, tc.h, FamilyPixtral, ProcessorConfig{}); got != tc.want {
			t.Errorf("pixtral %dx%d = %d, want %d", tc.w, tc.h, got, tc.want)
		}
	}
}
