package client

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
)

// Health calls GET /health: nil when the worker answers 200 (vLLM: the engine is alive).
func (e *Endpoint) Health(ctx context.Context) error {
	var resp Response
	if err := e.Do(ctx, &Request{Path: "/health"}, &resp); err != nil {
		return err
	}
	if resp.Status != 200 {
		return &Error{Class: ErrStatus, Status: resp.Status, Body: resp.Body, Addr: e.addr}
	}
	return nil
}

// Metrics are the scheduling-relevant values of a worker's /metrics.
type Metrics struct {
	// BlockSize and NumGPUBlocks come from vllm:cache_config_info (0 when absent). With several engines
	// (dp ranks) NumGPUBlocks is per engine, as vLLM reports it.
	BlockSize    int
	NumGPUBlocks int
	// Running and Waiting are vllm:num_requests_running / _waiting summed over engines.
	Running, Waiting float64
	// KVUsage is vllm:kv_cache_usage_perc (0..1), the mean over engines (the deprecated
	// vllm:gpu_cache_usage_perc when only that one is present).
	KVUsage float64
	// Engines are the per-engine values, by the "engine" label, in order of appearance.
	Engines []EngineMetrics
}

// EngineMetrics are one engine's (dp rank's) gauges.
type EngineMetrics struct {
	Engine                    string
	Running, Waiting, KVUsage float64
}

// ScrapeMetrics calls GET /metrics and parses it.
func (e *Endpoint) ScrapeMetrics(ctx context.Context) (Metrics, error) {
	var resp Response
	if err := e.Do(ctx, &Request{Path: "/metrics"}, &resp); err != nil {
		return Metrics{}, err
	}
	if resp.Status != 200 {
		return Metrics{}, &Error{Class: ErrStatus, Status: resp.Status, Body: resp.Body, Addr: e.addr}
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads the vLLM series the router uses from a Prometheus text exposition; other lines
// are skipped. Pure, so it is fuzzed and tested on fixtures.
func ParseMetrics(text []byte) (Metrics, error) {
	var m Metrics
	var newUsage bool
	engine := func(label string) *EngineMetrics {
		for i := range m.Engines {
			if m.Engines[i].Engine == label {
				return &m.Engines[i]
			}
		}
		m.Engines = append(m.Engines, EngineMetrics{Engine: label})
		return &m.Engines[len(m.Engines)-1]
	}
	for len(text) > 0 {
		var line []byte
		line, text, _ = bytes.Cut(text, []byte("\n"))
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' || !bytes.HasPrefix(line, []byte("vllm:")) {
			continue
		}
		name, labels, value, err := splitSample(line)
		if err != nil {
			return Metrics{}, fmt.Errorf("client: metrics line %q: %w", line, err)
		}
		switch string(name) {
		case "vllm:cache_config_info":
			if v := label(labels, "block_size"); v != "" {
				if m.BlockSize, err = strconv.Atoi(v); err != nil {
					return Metrics{}, fmt.Errorf("client: cache_config_info block_size %q: %w", v, err)
				}
			}
			if v := label(labels, "num_gpu_blocks"); v != "" && v != "None" {
				if m.NumGPUBlocks, err = strconv.Atoi(v); err != nil {
					return Metrics{}, fmt.Errorf("client: cache_config_info num_gpu_blocks %q: %w", v, err)
				}
			}
		case "vllm:num_requests_running":
			engine(label(labels, "engine")).Running = value
		case "vllm:num_requests_waiting":
			engine(label(labels, "engine")).Waiting = value
		case "vllm:kv_cache_usage_perc":
			newUsage = true
			engine(label(labels, "engine")).KVUsage = value
		case "vllm:gpu_cache_usage_perc":
			if !newUsage {
				engine(label(labels, "engine")).KVUsage = value
			}
		}
	}
	for _, e := range m.Engines {
		m.Running += e.Running
		m.Waiting += e.Waiting
		m.KVUsage += e.KVUsage
	}
	if len(m.Engines) > 0 {
		m.KVUsage /= float64(len(m.Engines))
	}
	return m, nil
}

// splitSample splits `name{labels} value [timestamp]`.
func splitSample(line []byte) (name, labels []byte, value float64, err error) {
	rest := line
	if i := bytes.IndexByte(line, '{'); i >= 0 {
		name = line[:i]
		j := closingBrace(line, i)
		if j < 0 {
			return nil, nil, 0, fmt.Errorf("unterminated labels")
		}
		labels, rest = line[i+1:j], line[j+1:]
	} else {
		i := bytes.IndexAny(line, " \t")
		if i < 0 {
			return nil, nil, 0, fmt.Errorf("no value")
		}
		name, rest = line[:i], line[i:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return nil, nil, 0, fmt.Errorf("no value")
	}
	value, err = strconv.ParseFloat(string(fields[0]), 64)
	return name, labels, value, err
}

// closingBrace finds the '}' closing the label set opened at line[i], skipping quoted values.
func closingBrace(line []byte, i int) int {
	inQuote := false
	for j := i + 1; j < len(line); j++ {
		switch c := line[j]; {
		case inQuote && c == '\\':
			j++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return j
		}
	}
	return -1
}

// label returns the unescaped value of key in a label set, or "".
func label(labels []byte, key string) string {
	for len(labels) > 0 {
		eq := bytes.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return ""
		}
		k := bytes.TrimSpace(bytes.TrimLeft(labels[:eq], ", "))
		j := eq + 2
		var v []byte
		for ; j < len(labels) && labels[j] != '"'; j++ {
			if labels[j] == '\\' && j+1 < len(labels) {
				j++
				switch labels[j] {
				case 'n':
					v = append(v, '\n')
				default:
					v = append(v, labels[j])
				}
				continue
			}
			v = append(v, labels[j])
		}
		if string(k) == key {
			return string(v)
		}
		if j+1 > len(labels) {
			return ""
		}
		labels = labels[j+1:]
	}
	return ""
}
