package k8spool

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Pod is what the watcher reads of a pod: the fields that decide whether it is a worker and which.
type Pod struct {
	Namespace, Name     string
	Labels, Annotations map[string]string
	Leaving             bool   // metadata.deletionTimestamp is set
	IP                  string // status.podIP
	Phase               string // status.phase
	Ready               bool   // status.conditions has Ready "True"
}

// ReadPod reads a pod object as the API server serves it (core/v1 JSON, decoded by the dynamic client).
// Fields of the wrong type read as absent, so such a pod is not ready.
func ReadPod(obj map[string]any) Pod {
	var p Pod
	p.Namespace, _, _ = unstructured.NestedString(obj, "metadata", "namespace")
	p.Name, _, _ = unstructured.NestedString(obj, "metadata", "name")
	p.Labels, _, _ = unstructured.NestedStringMap(obj, "metadata", "labels")
	p.Annotations, _, _ = unstructured.NestedStringMap(obj, "metadata", "annotations")
	if ts, ok, _ := unstructured.NestedFieldNoCopy(obj, "metadata", "deletionTimestamp"); ok && ts != nil {
		p.Leaving = true
	}
	p.IP, _, _ = unstructured.NestedString(obj, "status", "podIP")
	p.Phase, _, _ = unstructured.NestedString(obj, "status", "phase")
	conds, _, _ := unstructured.NestedFieldNoCopy(obj, "status", "conditions")
	list, _ := conds.([]any)
	for _, c := range list {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			p.Ready = m["status"] == "True"
			break
		}
	}
	return p
}

// trimPod is the pod informer's transform: it keeps only what ReadPod and the informer's store read
// (identity, labels, annotations, deletion, IP, phase, conditions' type and status), so the store holds
// a few hundred bytes a pod instead of its whole spec and managed fields.
func trimPod(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone (cache.DeletedFinalStateUnknown) is left as it is
	}
	meta := map[string]any{}
	copyKeys(meta, u.Object["metadata"], "name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp")
	status := map[string]any{}
	copyKeys(status, u.Object["status"], "podIP", "phase")
	if src, ok := u.Object["status"].(map[string]any); ok {
		if list, ok := src["conditions"].([]any); ok {
			conds := make([]any, 0, len(list))
			for _, c := range list {
				kept := map[string]any{}
				copyKeys(kept, c, "type", "status")
				conds = append(conds, kept)
			}
			status["conditions"] = conds
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.Object["apiVersion"], "kind": u.Object["kind"], "metadata": meta, "status": status,
	}}, nil
}

// copyKeys copies the named keys present in src (when src is an object) into dst.
func copyKeys(dst map[string]any, src any, keys ...string) {
	m, ok := src.(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			dst[k] = v
		}
	}
}
