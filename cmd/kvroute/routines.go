package main

import "github.com/kvroute/kvroute/internal/routine"

// The binary's own long-lived goroutines (the picker's are in epp.go). Each is counted on /metrics as
// kvroute_goroutines{name} and listed on /debug/goroutines.
var (
	httpServe        = routine.Named("cmd.http-serve")           // the frontend's listener; ended by Server.Shutdown
	shutdownOnSignal = routine.Named("cmd.shutdown-on-signal")   // kvroute router: SIGINT/SIGTERM shuts the server down
	discoveryWatch   = routine.Named("cmd.nats-discovery")       // --discovery nats: the watcher adding workers; joined through done
	registrar        = routine.Named("cmd.nats-registrar")       // a worker's discovery registration and heartbeat, until ctx ends
	registrarsDone   = routine.Named("cmd.nats-registrars-done") // closes the connection once every registration is deleted
	hugeDecide       = routine.Named("cmd.huge-pages-auto")      // a server's --huge-pages auto: the probe and the reservation, once per process
)
