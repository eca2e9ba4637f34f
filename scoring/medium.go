package scoring

import "strings"

// Medium is the storage tier a cached KV block lives in, parsed from the `medium` string of vLLM's
// BlockStored / BlockRemoved events (Dynamo's StorageTier). The zero value is
// MediumDevice: the engine's own block pool, and every event without a medium (vLLM before v0.11, SGLang's
// early structs) comes from it.
//
// Only device blocks are prefix-cache hits in the cost function's device term; host and disk blocks are
// cheaper to load than to recompute but are not the engine's cache, and are credited separately (or, until
// the index keeps per-tier refcounts, not at all).
type Medium uint8

const (
	// MediumDevice is the accelerator's own KV pool: "GPU", "DEVICE", None.
	MediumDevice Medium = iota
	// MediumHostPinned is host memory an offloading connector fills: vLLM's "CPU", Dynamo's "CPU_PINNED" /
	// "CPU_TIER1".
	MediumHostPinned
	// MediumDisk is local disk or NVMe: "CPU_TIER2", "DISK", "NVME".
	MediumDisk
	// MediumExternal is storage shared beyond the worker: "EXTERNAL", "NETWORK", "REMOTE", "SHARED".
	MediumExternal
	// MediumUnknown is a medium string none of the above names; such blocks are not credited as device
	// cache.
	MediumUnknown
)

// ParseMedium maps an event's medium string to its tier, case-insensitively (Dynamo's StorageTier
// parsing, plus vLLM's "CPU" offload medium as host-pinned). "" (None on the wire) is MediumDevice.
func ParseMedium(s string) Medium {
	switch s {
	case "", "GPU": // the block pool's constant, and the absent field: the common cases first
		return MediumDevice
	case "CPU":
		return MediumHostPinned
	}
	switch strings.ToUpper(s) {
	case "GPU", "DEVICE", "CUDA", "XPU", "HPU", "TPU":
		return MediumDevice
	case "CPU", "CPU_PINNED", "CPU_TIER1", "HOST", "HOST_PINNED":
		return MediumHostPinned
	case "CPU_TIER2", "DISK", "NVME", "SSD":
		return MediumDisk
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return MediumExternal
	}
	return MediumUnknown
}

// String returns the tier's name as /v1/workers and the metrics label it: device, host, disk, external,
// unknown.
func (m Medium) String() string {
	switch m {
	case MediumDevice:
		return "device"
	case MediumHostPinned:
		return "host"
	case MediumDisk:
		return "disk"
	case MediumExternal:
		return "external"
	}
	return "unknown"
}
