package main

import (
	"flag"
	"strings"

	"github.com/kvroute/kvroute/workers/registry"
)

// bindFlags collects repeatable --kv-events-bind values: an endpoint, a tcp port range for dp ranks
// (tcp://*:5557-5558), or a comma list; the expanded endpoints receive dp ranks 0, 1, ... in order.
type bindFlags []string

func (b *bindFlags) String() string { return strings.Join(*b, ",") }

func (b *bindFlags) Set(s string) error {
	eps, err := registry.ExpandBindEndpoints([]string{s})
	if err != nil {
		return err
	}
	*b = append(*b, eps...)
	return nil
}

func registerBindFlag(fs *flag.FlagSet) *bindFlags {
	var b bindFlags
	fs.Var(&b, "kv-events-bind", "bind a SUB socket here for publishers that connect to the router (e.g. tcp://*:5557); workers are matched by topic. Repeatable; a port range tcp://*:5557-5558 binds one port per dp rank (rank r publishes to port + r)")
	return &b
}
