package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvroute/kvroute/model"
	"github.com/kvroute/kvroute/workers/client"
	"github.com/kvroute/kvroute/workers/registry"
)

// loadModel loads a served model's directory (model.Load; the tests load each fixture once per binary).
var loadModel = model.Load

// modelArg is one --model value: [name=]path[,block_size=N].
type modelArg struct {
	name, path string
	blockSize  int // 0: --kv-cache-block-size
}

// modelFlags is the repeatable --model flag.
type modelFlags []modelArg

func (m *modelFlags) String() string {
	names := make([]string, len(*m))
	for i, a := range *m {
		names[i] = a.name
	}
	return strings.Join(names, ",")
}

func (m *modelFlags) Set(s string) error {
	var a modelArg
	fields := strings.Split(s, ",")
	if name, path, ok := strings.Cut(fields[0], "="); ok {
		a.name, a.path = strings.TrimSpace(name), strings.TrimSpace(path)
		if a.name == "" {
			return fmt.Errorf("%q: empty model name", s)
		}
	} else {
		a.path = strings.TrimSpace(fields[0])
	}
	if a.path == "" {
		return fmt.Errorf("%q: want name=path (a model directory or HF cache name)", s)
	}
	for _, kv := range fields[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.TrimSpace(k) {
		case "block_size":
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n <= 0 || n > 1<<16 {
				return fmt.Errorf("%q: block_size %q is not a block size in tokens", s, v)
			}
			a.blockSize = n
		default:
			return fmt.Errorf("%q: unknown key %q (want block_size)", s, k)
		}
	}
	*m = append(*m, a)
	return nil
}

// servedModel is one model of the frontend, loaded.
type servedModel struct {
	modelArg
	dir string
	m   *model.Model // nil with --tokenizer none
}

// modelArgs returns the models to serve: the --model values, else the one of --model-path and
// --model-name.
func (f *frontendFlags) modelArgs() []modelArg {
	if len(f.models) > 0 {
		return f.models
	}
	return []modelArg{{name: *f.modelName, path: *f.modelPath}}
}

// loadModels resolves and loads every model in parallel (startup takes the slowest tokenizer, not the
// sum) and names the unnamed ones by their directory. Names must be distinct.
func loadModels(args []modelArg, tokenizer bool) ([]servedModel, error) {
	out := make([]servedModel, len(args))
	errs := make([]error, len(args))
	var wg sync.WaitGroup
	for i, a := range args {
		out[i].modelArg = a
		if !tokenizer {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, err := model.Resolve(a.path)
			if err != nil {
				errs[i] = fmt.Errorf("model %q: %w (for fleets fed token ids, --tokenizer none runs without a model)", a.path, err)
				return
			}
			out[i].dir = dir
			if out[i].m, err = loadModel(dir); err != nil {
				errs[i] = err
			}
			if out[i].name == "" {
				out[i].name = modelNameOf(dir)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, sm := range out {
		if seen[sm.name] {
			return nil, fmt.Errorf("--model: the name %q is given twice", sm.name)
		}
		seen[sm.name] = true
	}
	return out, nil
}

// assignModel picks the model a worker serves: its spec's model= when given, else the name the worker's
// own /v1/models reports (with several models served), else the first model.
func assignModel(spec registry.Spec, names []string, log *slog.Logger) (int, error) {
	idx := func(n string) int {
		for i, m := range names {
			if m == n {
				return i
			}
		}
		return -1
	}
	if spec.Model != "" {
		if i := idx(spec.Model); i >= 0 {
			return i, nil
		}
		if len(names) == 1 {
			// One model: the worker's own name for it (vLLM's --served-model-name) may differ from the
			// frontend's, as before workers carried names.
			log.Warn("worker names another model than the one served; routing it for the served model",
				"worker", spec.ID, "worker_model", spec.Model, "model", names[0])
			return 0, nil
		}
		return 0, fmt.Errorf("worker %d: model %q is not one of the served models %v", spec.ID, spec.Model, names)
	}
	if len(names) == 1 {
		return 0, nil
	}
	served, err := workerModels(spec)
	if err != nil {
		return 0, fmt.Errorf("worker %d: no model= in its spec, and its /v1/models could not be read: %w", spec.ID, err)
	}
	for _, n := range served {
		if i := idx(n); i >= 0 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("worker %d: no model= in its spec, and its /v1/models (%v) names none of the served models %v", spec.ID, served, names)
}

// workerModels reads the model ids a worker's /v1/models lists.
func workerModels(spec registry.Spec) ([]string, error) {
	cfg := client.DefaultConfig()
	cfg.APIKey = spec.Key()
	ep, err := client.NewEndpoint(spec.URL, cfg)
	if err != nil {
		return nil, err
	}
	defer ep.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp client.Response
	if err := ep.Do(ctx, &client.Request{Path: "/v1/models"}, &resp); err != nil {
		return nil, err
	}
	if resp.Status != 200 {
		return nil, fmt.Errorf("status %d", resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(resp.Body, &list); err != nil {
		return nil, err
	}
	ids := make([]string, len(list.Data))
	for i, d := range list.Data {
		ids[i] = d.ID
	}
	return ids, nil
}
