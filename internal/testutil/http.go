package testutil

import (
	"net/http"
	"strconv"
)

// WriteHeld answers with body and its Content-Length, but holds the second half until release is closed
// or the client goes away: a download is in flight, half read, for as long as a test needs.
func WriteHeld(w http.ResponseWriter, r *http.Request, body []byte, release <-chan struct{}) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	select {
	case <-release:
	case <-r.Context().Done():
		return
	}
	_, _ = w.Write(body[len(body)/2:])
}
