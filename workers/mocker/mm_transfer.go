package mocker

// The worker side of the mm_kwargs handoff (package transfer). An image
// content part may carry "mm_kwargs", a transfer.Descriptor the frontend attached after preprocessing
// the image: the mocker reads it from the shared-memory segment or pulls it from the frontend's
// transfer agent, verifies it (checksum, shape, mm_hash), checks that its patch grid gives the token
// count this model expects, and then uses it instead of fetching the image. Any failure (segment
// gone, agent unreachable or refusing, corrupt bytes, grid for another processor) falls back to the
// URL, as vLLM's try_receive_mm_kwargs returning None does. The three outcomes are counted in
// kvroute:mm_kwargs_total{path="shm"|"net"|"fallback_url"} on /metrics.
//
// This file is the only mocker code of the hook; the other files have a few lines marked
// "mm transfer hook".

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/transfer"
)

// mmTransfer is the Worker's handoff state: counters only (the receiver is stateless).
type mmTransfer struct {
	recv                transfer.Receiver
	shm, net, fallbacks atomic.Uint64
}

// mmReceiveTimeout bounds one handoff read: past it the URL is the faster path.
const mmReceiveTimeout = 5 * time.Second

// resolveImage is imageResolver.resolve with the mm_kwargs handoff tried first.
func (w *Worker) resolveImage(p ChatPart) (id string, width, height int, err error) {
	if len(p.MMKwargs) == 0 {
		return w.images.resolve(p)
	}
	id, width, height, err = w.receiveImage(p)
	if err != nil {
		w.mmx.fallbacks.Add(1)
		return w.images.resolve(p)
	}
	return id, width, height, nil
}

// receiveImage reads and checks the part's descriptor. The size it returns is the resized size
// (grid × patch), which smart_resize maps to itself, so ImageTokens gives the processor's count.
func (w *Worker) receiveImage(p ChatPart) (string, int, int, error) {
	var d transfer.Descriptor
	if err := json.Unmarshal(p.MMKwargs, &d); err != nil {
		return "", 0, 0, fmt.Errorf("mocker: mm_kwargs: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mmReceiveTimeout)
	defer cancel()
	t, err := w.mmx.recv.Receive(ctx, d)
	if err != nil {
		return "", 0, 0, err
	}
	rh, rw := t.GridTHW[1]*w.model.PatchSize, t.GridTHW[2]*w.model.PatchSize
	merge := w.model.MergeSize * w.model.MergeSize
	if merge == 0 || t.GridTHW[0] != 1 || t.Rows/merge != w.model.ImageTokens(rw, rh) {
		return "", 0, 0, fmt.Errorf("mocker: mm_kwargs grid %v does not fit this model's processor", t.GridTHW)
	}
	id := p.UUID
	if id == "" {
		id = t.Hash.VLLMUUID()
	}
	w.images.mu.Lock()
	w.images.sizes[id] = [2]int{rw, rh}
	w.images.mu.Unlock()
	if d.Kind == transfer.KindShm {
		w.mmx.shm.Add(1)
	} else {
		w.mmx.net.Add(1)
	}
	return id, rw, rh, nil
}

// appendMetrics writes the handoff counters.
func (m *mmTransfer) appendMetrics(b []byte, model string) []byte {
	b = append(b, "# HELP kvroute:mm_kwargs Images by how the worker obtained them when the part carried mm_kwargs.\n# TYPE kvroute:mm_kwargs counter\n"...)
	for _, s := range []struct {
		path string
		v    *atomic.Uint64
	}{{"shm", &m.shm}, {"net", &m.net}, {"fallback_url", &m.fallbacks}} {
		b = append(b, `kvroute:mm_kwargs_total{model_name="`+model+`",path="`+s.path+`"} `...)
		b = strconv.AppendUint(b, s.v.Load(), 10)
		b = append(b, '\n')
	}
	return b
}
