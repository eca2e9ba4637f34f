package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/goccy/go-json"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvroute/kvroute/workers/k8spool"
)

func deployDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var metricNameRE = regexp.MustCompile(`\b(?:dynamo|kvroute)_[a-z0-9_]+\b`)

// queriedMetrics returns every metric name the Grafana dashboard and the alert rules query.
func queriedMetrics(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	raw, err := os.ReadFile(filepath.Join(dir, "grafana", "kvroute-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricNameRE.FindAllString(tg.Expr, -1) {
				out[m] = append(out[m], "dashboard: "+p.Title)
			}
		}
	}
	raw, err = os.ReadFile(filepath.Join(dir, "prometheus", "kvroute-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alert rules: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert rule %+v lacks alert, expr, severity or summary", r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			for _, m := range metricNameRE.FindAllString(r.Expr, -1) {
				out[m] = append(out[m], "alert: "+r.Alert)
			}
		}
	}
	return out
}

// exposedMetrics parses a /metrics page into the names a query can use (histograms with their
// _bucket, _sum and _count series).
func exposedMetrics(page string) map[string]bool {
	have := map[string]bool{}
	for _, l := range strings.Split(page, "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			have[f[2]] = true
			if f[3] == "histogram" || f[3] == "summary" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					have[f[2]+s] = true
				}
			}
		}
	}
	return have
}

// TestDeployKitQueriesExist starts kvroute serve in-process, sends streamed and unary requests, and
// checks that every metric the Grafana dashboard and the Prometheus alert rules query is on /metrics.
func TestDeployKitQueriesExist(t *testing.T) {
	queried := queriedMetrics(t, deployDir(t))
	if len(queried) < 10 {
		t.Fatalf("only %d metrics queried: the dashboard or the rules did not parse", len(queried))
	}
	captureCLI(t)
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	f, _, code, ok := parseFrontend("serve", []string{"--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "200ms",
		"--model-path", modelDir}, nil)
	if !ok {
		t.Fatalf("exit %d", code)
	}
	app, err := startServe(f, serveConfig{workers: 2, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer app.closeFleet()
	defer app.stop()
	base := "http://" + app.ln.Addr().String()
	hc := &http.Client{Timeout: 30 * time.Second}
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	for i, stream := range []bool{true, false, false} {
		extra := ""
		if stream {
			extra = `,"stream":true,"stream_options":{"include_usage":true}`
		}
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8%s}`, *f.modelName, prompt, extra)
		resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		have := exposedMetrics(string(page))
		missing = missing[:0]
		for m, where := range queried {
			if !have[m] {
				missing = append(missing, m+" ("+strings.Join(where, ", ")+")")
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("queried but not exposed by kvroute serve:\n%s", strings.Join(missing, "\n"))
	}
	t.Logf("%d metrics queried by the dashboard and the alert rules, all exposed", len(queried))
}

// k8sObject is the part of a manifest the schema check reads.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Name           string   `yaml:"name"`
					Image          string   `yaml:"image"`
					Args           []string `yaml:"args"`
					LivenessProbe  *probe   `yaml:"livenessProbe"`
					ReadinessProbe *probe   `yaml:"readinessProbe"`
					Ports          []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []struct {
			Name string `yaml:"name"`
			Port int    `yaml:"port"`
		} `yaml:"ports"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
	GRPC *struct {
		Port    int    `yaml:"port"`
		Service string `yaml:"service"`
	} `yaml:"grpc"`
}

// checkManifests parses a multi-document YAML stream and checks each object's shape: identity, label
// selectors that match their pod template, the frontend's probes on /live and /ready, and flags the
// binary accepts.
func checkManifests(t *testing.T, name string, src []byte) (kinds []string) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: not YAML: %v\n%s", name, err, src)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("%s: object without apiVersion, kind or metadata.name: %+v", name, o)
			continue
		}
		kinds = append(kinds, o.Kind)
		switch o.Kind {
		case "Deployment", "StatefulSet":
			for k, v := range o.Spec.Selector.MatchLabels {
				if o.Spec.Template.Metadata.Labels[k] != v {
					t.Errorf("%s: %s %s selector %s=%s does not match its pod template", name, o.Kind, o.Metadata.Name, k, v)
				}
			}
			if len(o.Spec.Template.Spec.Containers) == 0 {
				t.Errorf("%s: %s %s has no containers", name, o.Kind, o.Metadata.Name)
			}
			for _, c := range o.Spec.Template.Spec.Containers {
				if c.Image == "" || len(c.Ports) == 0 {
					t.Errorf("%s: container %s without image or ports", name, c.Name)
				}
				if c.Name == "epp" {
					checkPickerContainer(t, name, c.Args, c.LivenessProbe, c.ReadinessProbe)
					continue
				}
				if c.Name != "frontend" {
					continue
				}
				if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/live" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
					t.Errorf("%s: the frontend's probes are not /live and /ready", name)
				}
				if len(c.Args) == 0 || c.Args[0] != "frontend" {
					t.Errorf("%s: the frontend container does not run kvroute frontend: %v", name, c.Args)
					continue
				}
				// The flags must parse: the manifest's launch line against the real flag set.
				captureCLI(t)
				if _, _, code, ok := parseFrontend("frontend", c.Args[1:], nil); !ok {
					t.Errorf("%s: kvroute frontend refuses the manifest's args %v (exit %d)", name, c.Args[1:], code)
				}
			}
		case "Service":
			if len(o.Spec.Ports) == 0 {
				t.Errorf("%s: Service %s has no ports", name, o.Metadata.Name)
			}
		case "ServiceMonitor":
			if len(o.Spec.Endpoints) == 0 || o.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("%s: ServiceMonitor %s does not scrape /metrics", name, o.Metadata.Name)
			}
		}
	}
	return kinds
}

func TestDeployManifestsWellFormed(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"kvroute.yaml", "nats.yaml"} {
		src, err := os.ReadFile(filepath.Join(dir, "kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		if kinds := checkManifests(t, f, src); len(kinds) < 2 {
			t.Errorf("%s: %v", f, kinds)
		}
	}
	chart := filepath.Join(dir, "helm", "kvroute")
	var meta struct {
		APIVersion string `yaml:"apiVersion"`
		Name       string `yaml:"name"`
		Version    string `yaml:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil || meta.APIVersion != "v2" || meta.Name != "kvroute" || meta.Version == "" {
		t.Fatalf("Chart.yaml: %v %+v", err, meta)
	}
	tests := []struct {
		name  string
		set   map[string]any
		kinds string
	}{
		{"defaults", nil, "Deployment Service ServiceMonitor"},
		{"picker", map[string]any{"picker.enabled": true, "workers": []any{}, "picker.tlsSecret": "epp-tls"},
			"Deployment Service ServiceMonitor InferencePool ServiceAccount Role RoleBinding"},
		{"picker locked down", map[string]any{"picker.enabled": true, "workers": []any{}, "picker.clientCASecret": "gateway-ca",
			"picker.gatewayPeers": []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "gateway-system"}}}}},
			"Deployment Service ServiceMonitor InferencePool ServiceAccount Role RoleBinding NetworkPolicy"},
		{"nats and cache", map[string]any{"nats.enabled": true, "hfCache.claimName": "hf", "discovery": "nats", "workers": []any{},
			"serviceMonitor.enabled": false, "adminTokenSecret": "kvroute-admin"}, "Deployment StatefulSet Service Service"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := renderChart(t, chart, tc.set)
			kinds := checkManifests(t, "helm "+tc.name, []byte(out))
			sort.Strings(kinds)
			want := strings.Fields(tc.kinds)
			sort.Strings(want)
			if strings.Join(kinds, " ") != strings.Join(want, " ") {
				t.Errorf("rendered %v, want %v\n%s", kinds, want, out)
			}
			checkInferencePools(t, out)
			checkPickerLockdown(t, out, tc.set)
		})
	}
	df, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(df), "\nFROM ") < 2 || !strings.Contains(string(df), "libzmq") {
		t.Error("Dockerfile: want a multi-stage build with libzmq")
	}
}

// renderChart renders the Helm chart's templates with values.yaml (overridden by set, dotted keys)
// through Go's text/template and the few Helm functions the chart uses. Helm itself is not available
// on this machine; the chart keeps to these functions so this check stays exact.
func renderChart(t *testing.T, dir string, set map[string]any) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	for k, v := range set {
		m := values
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = v
	}
	root := template.New("chart").Option("missingkey=error")
	root.Funcs(template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b bytes.Buffer
			err := root.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string { return strconv.Quote(fmt.Sprint(v)) },
		"ternary": func(a, b any, cond bool) any {
			if cond {
				return a
			}
			return b
		},
		"add": func(xs ...any) (int, error) {
			sum := 0
			for _, x := range xs {
				switch x := x.(type) {
				case int:
					sum += x
				default:
					return 0, fmt.Errorf("add: %T", x)
				}
			}
			return sum, nil
		},
	})
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.New(filepath.Base(f)).Parse(string(src)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	data := map[string]any{"Values": values, "Release": map[string]any{"Name": "test"}, "Chart": map[string]any{"Name": "kvroute"}}
	var out strings.Builder
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "_") {
			continue
		}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, filepath.Base(f), data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if s := strings.TrimSpace(b.String()); s != "" {
			out.WriteString("---\n" + s + "\n")
		}
	}
	return out.String()
}

// checkPickerContainer checks a kvroute epp container: its flags parse, and its probes are the gRPC
// health services on --grpc-health-port.
func checkPickerContainer(t *testing.T, name string, args []string, live, ready *probe) {
	t.Helper()
	if len(args) == 0 || args[0] != "epp" {
		t.Errorf("%s: the epp container does not run kvroute epp: %v", name, args)
		return
	}
	captureCLI(t)
	_, e, _, code, ok := parseEPP(args[1:])
	if !ok {
		t.Errorf("%s: kvroute epp refuses the manifest's args %v (exit %d)", name, args[1:], code)
		return
	}
	for svc, p := range map[string]*probe{"liveness": live, "readiness": ready} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != *e.healthPort || p.GRPC.Service != svc {
			t.Errorf("%s: the epp's %s probe is not the gRPC health service on --grpc-health-port %d", name, svc, *e.healthPort)
		}
	}
}

// checkInferencePools reads every rendered InferencePool as the picker's pool watcher does.
func checkInferencePools(t *testing.T, out string) {
	t.Helper()
	for _, doc := range strings.Split(out, "\n---\n") {
		if !strings.Contains(doc, "kind: InferencePool") {
			continue
		}
		js, err := sigsyaml.YAMLToJSON([]byte(strings.TrimPrefix(doc, "---\n")))
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		if p, ok := k8spool.ParsePool(u.Object); !ok || p.Selector.Empty() {
			t.Errorf("the chart's InferencePool is not one the picker can read: %+v\n%s", p, doc)
		}
	}
}

// checkPickerLockdown checks the picker's mutual TLS and NetworkPolicy as rendered: --client-ca-path
// names a file under a mount of the clientCASecret volume, and the policy selects the picker's pods,
// admits gatewayPeers alone to the gRPC port and names only ports the container declares.
func checkPickerLockdown(t *testing.T, out string, set map[string]any) {
	t.Helper()
	type podSpec struct {
		Containers []struct {
			Name  string   `yaml:"name"`
			Args  []string `yaml:"args"`
			Ports []struct {
				Name string `yaml:"name"`
			} `yaml:"ports"`
			VolumeMounts []volumeMount `yaml:"volumeMounts"`
		} `yaml:"containers"`
		Volumes []secretVolume `yaml:"volumes"`
	}
	type object struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			PodSelector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"podSelector"`
			Ingress []struct {
				From  []any `yaml:"from"`
				Ports []struct {
					Port any `yaml:"port"`
				} `yaml:"ports"`
			} `yaml:"ingress"`
		} `yaml:"spec"`
	}
	var pod podSpec
	var labels map[string]string
	var policies []string
	for _, raw := range strings.Split(out, "\n---\n") {
		var doc object
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(raw, "---\n")), &doc); err != nil {
			t.Fatal(err)
		}
		switch doc.Kind {
		case "Deployment":
			pod, labels = doc.Spec.Template.Spec, doc.Spec.Template.Metadata.Labels
		case "NetworkPolicy":
			policies = append(policies, raw)
		}
	}
	caSecret, _ := set["picker.clientCASecret"].(string)
	for _, c := range pod.Containers {
		if c.Name != "epp" {
			continue
		}
		var caPath string
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--client-ca-path="); ok {
				caPath = v
			}
		}
		if (caPath != "") != (caSecret != "") {
			t.Errorf("clientCASecret %q, --client-ca-path %q", caSecret, caPath)
		}
		if caPath != "" && !mountedFrom(caPath, caSecret, c.VolumeMounts, pod.Volumes) {
			t.Errorf("--client-ca-path %s is not under a mount of Secret %s", caPath, caSecret)
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		peers, _ := set["picker.gatewayPeers"].([]any)
		if len(policies) != min(1, len(peers)) {
			t.Fatalf("%d NetworkPolicies for %d gateway peers", len(policies), len(peers))
		}
		for _, raw := range policies {
			var doc object
			if err := yaml.Unmarshal([]byte(strings.TrimPrefix(raw, "---\n")), &doc); err != nil {
				t.Fatal(err)
			}
			for k, v := range doc.Spec.PodSelector.MatchLabels {
				if labels[k] != v {
					t.Errorf("the NetworkPolicy selects %s=%s, not on the picker's pods", k, v)
				}
			}
			ing := doc.Spec.Ingress
			if len(ing) == 0 || len(ing[0].Ports) != 1 || ing[0].Ports[0].Port != "grpc" || fmt.Sprint(ing[0].From) != fmt.Sprint(peers) {
				t.Errorf("the NetworkPolicy's first rule does not admit the gateway peers alone to the gRPC port: %+v", ing)
			}
			for _, r := range ing {
				for _, p := range r.Ports {
					if name, _ := p.Port.(string); !ports[name] {
						t.Errorf("the NetworkPolicy names port %v, not one of the epp container's", p.Port)
					}
				}
			}
		}
	}
}

// volumeMount and secretVolume are the parts of a container's mounts and a pod's volumes the chart
// checks read.
type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
}

type secretVolume struct {
	Name   string `yaml:"name"`
	Secret struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
}

// mountedFrom reports whether path lies under a volume mount of the named Secret.
func mountedFrom(path, secret string, mounts []volumeMount, volumes []secretVolume) bool {
	for _, m := range mounts {
		for _, v := range volumes {
			if v.Name == m.Name && v.Secret.SecretName == secret && strings.HasPrefix(path, m.MountPath+"/") {
				return true
			}
		}
	}
	return false
}
