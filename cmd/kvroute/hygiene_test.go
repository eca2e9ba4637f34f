package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// funcDecl is one function of the module's non-test code.
type funcDecl struct {
	key   string // "path/to/file.go Recv.Name", relative to the module root
	lines int    // lines between the braces of the body
	decl  *ast.FuncDecl
}

// moduleFuncs parses every non-test Go file of the module (testdata and hidden directories left out).
func moduleFuncs(t *testing.T) (*token.FileSet, []funcDecl) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []funcDecl
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Body.Lbrace).Line - 1
			out = append(out, funcDecl{key: filepath.ToSlash(rel) + " " + funcName(fd), lines: n, decl: fd})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 1000 {
		t.Fatalf("found %d functions; want the whole module", len(out))
	}
	return fset, out
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// bareGo lists the functions allowed a bare `go` statement, with why. Everything else starts its
// goroutines through internal/routine (named, counted on /metrics and /debug/goroutines, pprof-labelled,
// owned by a Group); these are short fan-outs the function itself joins with a WaitGroup before it
// returns, so they cannot outlive their caller and a count would show nothing a profile does not.
var bareGo = map[string]string{
	"internal/routine/routine.go Kind.Go":         "the helper itself",
	"internal/routine/routine.go Group.Go":        "the helper itself",
	"mm/resolve.go Resolver.fanOut":               "one goroutine per image of a request, joined before Resolve returns (pprof-labelled)",
	"frontend/health.go Monitor.round":            "one health check per worker, joined before the round returns",
	"workers/mocker/fleet.go Fleet.Close":         "closes the workers concurrently, joined before Close returns",
	"cmd/kvroute/models.go loadModels":            "loads the served models' directories concurrently, joined before returning",
	"bench/indexer.go IndexerWorkload.RunIndexer": "one replay goroutine per timeline, joined before the run is measured",
	"bench/e2e.go RunArm":                         "the load generator's request per arrival, joined (and its joiner) before the arm returns",
	"bench/lab/run.go runJobs":                    "a bounded pool of arm simulations, joined before the report",
}

// TestGoStatementsAreTracked fails on a `go` statement outside internal/routine and the fan-outs listed
// in bareGo.
func TestGoStatementsAreTracked(t *testing.T) {
	fset, funcs := moduleFuncs(t)
	seen := map[string]bool{}
	for _, f := range funcs {
		ast.Inspect(f.decl.Body, func(n ast.Node) bool {
			g, ok := n.(*ast.GoStmt)
			if !ok {
				return true
			}
			seen[f.key] = true
			if _, ok := bareGo[f.key]; !ok {
				t.Errorf("%s: bare go statement in %s; start it through internal/routine (a Kind and a Group)", fset.Position(g.Pos()), f.key)
			}
			return true
		})
	}
	for k := range bareGo {
		if !seen[k] {
			t.Errorf("bareGo lists %s, which has no go statement (renamed or converted): drop the entry", k)
		}
	}
}

// longFunctions are the functions over maxFuncLines lines left as they are, with their length when
// listed. A function not listed fails the test once it passes the limit; split it where its parts have
// names.
const maxFuncLines = 80

var longFunctions = map[string]int{
	// The benchmark harness: each is one measured run read top to bottom.
	"bench/indexer.go IndexerWorkload.RunIndexer": 131,
	"bench/e2e_report.go FillE2EReport":           121,
	"bench/indexer.go PrepareIndexer":             111,
	"cmd/kvroute/benchlab.go benchLab":            107,
	"bench/simroute.go Oracle.SimulateRouting":    90,
	"bench/lab/sim.go runArmWith":                 89,
	"bench/e2e_report.go SummarizeArm":            84,
	// Model-family template code: one function per template's control flow.
	"model/template.go writePyJSON":        116,
	"model/template_native.go renderQwen3": 103,
	// The routing core's pure logic, changed by other work at the time this list was made.
	"scoring/config.go Config.Validate":              112,
	"scoring/sched/calibrated.go Machine.calibrated": 98,
	"scoring/prefix/dump.go Index.Dump":              86,
	"scoring/scenario/scenario.go Runner.expect":     86,
	"scoring/prefix/tiers.go View.findTiered":        83,
	"scoring/policy/parse.go resolveProfile":         82,
	"scoring/prefix/index.go Index.store":            82,
	// A flat list of metric definitions.
	"frontend/metrics.go NewFrontendMetricsWith": 83,
}

// TestFunctionLength lists the module's functions over maxFuncLines lines (go test -v -run
// TestFunctionLength ./cmd/kvroute/ prints the count) and fails on one not in longFunctions.
func TestFunctionLength(t *testing.T) {
	_, funcs := moduleFuncs(t)
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].lines > funcs[j].lines })
	long := 0
	for _, f := range funcs {
		if f.lines <= maxFuncLines {
			continue
		}
		long++
		if _, ok := longFunctions[f.key]; !ok {
			t.Errorf("%s is %d lines (limit %d): split it where its parts have names", f.key, f.lines, maxFuncLines)
			continue
		}
		t.Logf("%4d %s", f.lines, f.key)
	}
	for k := range longFunctions {
		found := false
		for _, f := range funcs {
			if f.key == k && f.lines > maxFuncLines {
				found = true
			}
		}
		if !found {
			t.Logf("longFunctions lists %s, which is no longer over %d lines: drop the entry", k, maxFuncLines)
		}
	}
	t.Logf("%d functions over %d lines", long, maxFuncLines)
}
