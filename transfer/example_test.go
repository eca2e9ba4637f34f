package transfer_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/transfer"
)

// Example shows the frontend's use: the mode and the sender once at startup, then per request one
// Prepare per image run concurrently with routing, descriptors attached to the worker-bound body, and
// the releases deferred to the end of the response.
func Example() {
	// Startup (cmd/): flag value, then the environment.
	mode, err := transfer.ResolveMode("shm", nil)
	if err != nil || mode == transfer.ModeOff {
		return
	}
	proc := transfer.Qwen3VLProcessor() // or transfer.LoadProcessor(modelDir)
	sender, err := transfer.NewSender(transfer.Config{
		Mode:      mode,
		Processor: proc,
		// Fetch: func(ctx context.Context, u string) ([]byte, error) { return prober.Fetch(ctx, u, 0) },
	})
	if err != nil {
		return
	}
	defer sender.Close()

	// Per request: images in prompt order, with the identities the router computed.
	urls := []string{"data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACwAAAAAAQABAAACAkQBADs="}
	hashes := []mm.Hash{0x0123456789abcdef}
	descs := make([]*transfer.Descriptor, len(urls))
	releases := make([]func(), len(urls))
	var wg sync.WaitGroup
	for i := range urls {
		wg.Add(1)
		go func() { // concurrently with tokenization and routing
			defer wg.Done()
			d, release, err := sender.Prepare(context.Background(), transfer.Source{URL: urls[i]}, hashes[i])
			if err != nil {
				return // this image goes without mm_kwargs: the worker fetches the URL
			}
			descs[i], releases[i] = &d, release
		}()
	}
	// ... route ...
	wg.Wait()
	defer func() { // after the worker's response has ended, however it ended
		for _, r := range releases {
			if r != nil {
				r()
			}
		}
	}()
	// Attach descs[i] as the "mm_kwargs" member of image part i, then forward the body.
	fmt.Println(descs[0].Kind, descs[0].Shape, descs[0].GridTHW)
	// Output: shm [256 1536] [1 16 16]
}
