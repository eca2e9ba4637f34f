package mocker_test

import (
	"fmt"

	"github.com/kvroute/kvroute/workers/mocker"
)

// Start eight simulated vLLM workers in-process with ZMQ KV events and replay on free loopback ports, then
// run one request without HTTP.
func ExampleStartFleet() {
	eng := mocker.DefaultEngineConfig()
	eng.BlockSize, eng.SpeedupRatio = 16, 100
	fleet, err := mocker.StartFleet(mocker.FleetConfig{
		NumWorkers: 8,
		Template:   mocker.WorkerConfig{Engine: eng, KVEvents: mocker.DefaultKVEventsConfig()},
	})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()
	for _, spec := range fleet.Specs() {
		_ = spec // id=0,url=http://127.0.0.1:…,events=tcp://127.0.0.1:…,replay=…,block_size=16,…
	}
	prompt := make([]uint32, 100)
	for i := range prompt {
		prompt[i] = uint32(i)
	}
	s, err := fleet.Workers[0].Submit(-1, mocker.Request{Prompt: prompt, MaxTokens: 4})
	if err != nil {
		panic(err)
	}
	<-s.Finished()
	st := s.Read(0, nil)
	fmt.Println(len(st.Tokens), st.CachedTokens)
	// Output: 4 0
}
