package k8spool

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzParsePool reads InferencePool objects as the dynamic informer does (JSON through client-go's
// unstructured codec) and asserts what the watcher relies on: an accepted pool has a port in 1..65535
// and a selector that names at least one label, so that it never selects every pod of the namespace.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"inference.networking.k8s.io/v1","kind":"InferencePool","metadata":{"name":"qwen","namespace":"llm"},"spec":{"selector":{"matchLabels":{"app":"vllm"}},"targetPorts":[{"number":8000}],"endpointPickerRef":{"name":"kvroute-epp","failureMode":"FailOpen"}}}`,
		`{"apiVersion":"inference.networking.x-k8s.io/v1alpha2","kind":"InferencePool","metadata":{"name":"p"},"spec":{"selector":{"app":"x"},"targetPortNumber":8001,"extensionRef":{"name":"e","failureMode":"FailOpen"}}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"targetPortNumber":8001}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"selector":{"app":"x"}}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"selector":{"matchLabels":{}},"targetPortNumber":1}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"selector":{"matchLabels":{"a":"b"}},"targetPorts":[{"number":70000}]}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"selector":{"matchLabels":{"a":1}},"targetPorts":[{"number":"80"}],"targetPortNumber":-1}}`,
		`{"apiVersion":"v1","kind":"InferencePool","spec":{"selector":{"":""},"targetPorts":[8000],"targetPortNumber":8.5}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u, ok := decodeObject(b)
		if !ok {
			return
		}
		p, ok := ParsePool(u.Object)
		if !ok {
			return
		}
		if p.TargetPort < 1 || p.TargetPort > 65535 {
			t.Fatalf("accepted pool with port %d", p.TargetPort)
		}
		if p.Selector == nil || p.Selector.Empty() || p.Selector.Matches(labels.Set{}) {
			t.Fatalf("accepted pool %s selects every pod (%v)", b, p.Selector)
		}
		if p.FailureMode == "" {
			t.Fatalf("accepted pool with no failure mode")
		}
	})
}

// FuzzSpecOf describes a ready pod with arbitrary IP and annotations: a pod is either left out or
// becomes a spec that validates, whose URL and event endpoints are on the pod's IP.
func FuzzSpecOf(f *testing.F) {
	f.Add("10.0.0.7", "kvroute.io/worker-id=42\nkvroute.io/model-server-port=8001\nkvroute.io/kv-events-port=5560\nkvroute.io/kv-replay-port=5561\nkvroute.io/dp-size=2", 8000)
	f.Add("fd00::7", "kvroute.io/kv-events-port=0", 8000)
	f.Add("10.0.0.7", "kvroute.io/worker-id=x", 8000)
	f.Add("10.0.0.7", "kvroute.io/dp-size=1025\nkvroute.io/kv-events-port=65535", 8000)
	f.Add("10.0.0.7", "kvroute.io/kv-events-port=65535\nkvroute.io/dp-size=2", 8000)
	f.Add("1.2.3.4%eth0", "", 8000)
	f.Add("", "", 8000)
	f.Fuzz(func(t *testing.T, ip, ann string, port int) {
		w := &Watcher{cfg: DefaultConfig()}
		w.cfg.ReplayPort = 5558
		annotations := map[string]string{}
		for _, line := range strings.Split(ann, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				annotations[k] = v
			}
		}
		p := pod("w", ip, map[string]string{"app": "vllm"}, true, annotations)
		sp, ok := w.specOf(ReadPod(p.Object), Pool{TargetPort: port})
		if !ok {
			return
		}
		if err := sp.Validate(); err != nil {
			t.Fatalf("pod %q %v: spec %+v does not validate: %v", ip, annotations, sp, err)
		}
		u, err := url.Parse(sp.URL)
		if err != nil || u.Hostname() != ip {
			t.Fatalf("pod %q: url %q is not on the pod's IP", ip, sp.URL)
		}
		for _, ep := range []string{sp.Events, sp.Replay} {
			if ep == "" {
				continue
			}
			host, p, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://"))
			if n, _ := strconv.Atoi(p); err != nil || host != ip || n < 1 || n > 65535 {
				t.Fatalf("pod %q: endpoint %q", ip, ep)
			}
		}
		if v, ok := annotations[AnnotationWorkerID]; ok && strconv.FormatUint(sp.ID, 10) != v {
			t.Fatalf("worker id annotation %q, spec id %d", v, sp.ID)
		}
	})
}

// FuzzReadPod reads pod objects as the pods informer does (JSON through client-go's unstructured codec,
// then the informer's transform) and asserts that the transform keeps everything the watcher reads:
// the trimmed pod reads as the whole one, and a pod reads as ready only with a Ready condition "True".
func FuzzReadPod(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"llm","labels":{"app":"vllm"},"annotations":{"kvroute.io/worker-id":"7"},"managedFields":[{"manager":"kubelet"}]},"spec":{"containers":[{"name":"c"}]},"status":{"phase":"Running","podIP":"10.0.0.1","conditions":[{"type":"PodScheduled","status":"True"},{"type":"Ready","status":"True"}]}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","deletionTimestamp":"2026-12-07T00:00:00Z"},"status":{"phase":"Running","podIP":"fd00::1","conditions":[{"type":"Ready","status":"True"}]}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c","deletionTimestamp":null,"labels":{"a":1}},"status":{"phase":"Pending","conditions":[{"type":"Ready"}]}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"d"},"status":{"conditions":[7,{"type":"Ready","status":"False"},{"type":"Ready","status":"True"}],"podIP":3}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":"x","status":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u, ok := decodeObject(b)
		if !ok {
			return
		}
		whole := ReadPod(u.Object)
		trimmed, err := trimPod(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := ReadPod(trimmed.(*unstructured.Unstructured).Object); !reflect.DeepEqual(got, whole) {
			t.Fatalf("%s: trimmed pod reads %+v, whole %+v", b, got, whole)
		}
		// The decoded object written back out: the input may spell "True" with escapes.
		if canonical, err := json.Marshal(u.Object); err != nil || whole.Ready && !bytes.Contains(canonical, []byte(`"True"`)) {
			t.Fatalf("%s: ready without a condition \"True\" (%v)", b, err)
		}
	})
}

// decodeObject decodes an API object as the dynamic client does (JSON through client-go's unstructured
// codec); false for bytes the client would refuse.
func decodeObject(b []byte) (*unstructured.Unstructured, bool) {
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, b)
	if err != nil {
		return nil, false
	}
	u, ok := obj.(*unstructured.Unstructured)
	return u, ok
}
