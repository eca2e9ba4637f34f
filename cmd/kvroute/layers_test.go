package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// The layers of the module, lowest first (docs/architecture.md). A package may import its own layer and the
// ones below it, never one above: scoring and model know nothing of images, images nothing of transfers,
// the backend side (workers) nothing of the actors that mirror it, the actors nothing of the HTTP edge.
// Test files are left out: a test may drive real parts of a higher layer (natsplane's tests run a real
// router), and tests never ship.
var layers = [][]string{
	{"scoring", "model", "internal"},
	{"mm"},
	{"transfer"},
	{"workers"},
	{"actors"},
	{"frontend"},
	{"bench"},
	{"cmd"},
}

const module = "github.com/kvroute/kvroute"

// layerOf returns the layer of a package of this module by its first path element, or -1.
func layerOf(pkg string) int {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	top, _, _ := strings.Cut(rel, "/")
	for i, l := range layers {
		for _, name := range l {
			if top == name {
				return i
			}
		}
	}
	return -1
}

// upwardImports lists "a imports b" for every import of a higher layer in go list's output (one package a
// line: its path, then its imports, space-separated), and every package of no known layer.
func upwardImports(golist []byte) (bad []string) {
	for _, line := range strings.Split(strings.TrimSpace(string(golist)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, from := fields[0], layerOf(fields[0])
		if from < 0 {
			bad = append(bad, pkg+" is in no layer")
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if to := layerOf(imp); to > from {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	return bad
}

func TestUpwardImportsAreFound(t *testing.T) {
	tests := []struct {
		name, golist string
		want         int
	}{
		{"down", module + "/frontend " + module + "/actors/router " + module + "/scoring fmt", 0},
		{"same layer", module + "/workers/client " + module + "/workers/oaiwire", 0},
		{"up", module + "/workers/natsplane " + module + "/actors/router " + module + "/scoring", 1},
		{"mm above transfer", module + "/mm " + module + "/transfer", 1},
		{"no layer", module + "/misc", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := upwardImports([]byte(tc.golist)); len(got) != tc.want {
				t.Fatalf("upwardImports = %q, want %d", got, tc.want)
			}
		})
	}
}

// TestLayerOrder fails when a package of the module imports one of a higher layer.
func TestLayerOrder(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	if n := bytes.Count(out, []byte("\n")); n < 20 {
		t.Fatalf("go list listed %d packages; want the whole module", n)
	}
	for _, b := range upwardImports(out) {
		t.Errorf("layer order: %s", b)
	}
}
