//go:build race

package frontend

// raceDetector: the race detector is on; RSS then measures its shadow memory too, not the server.
const raceDetector = true
