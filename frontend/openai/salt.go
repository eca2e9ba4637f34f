package openai

import (
	"bytes"
	"errors"

	json "github.com/goccy/go-json"
)

// SetCacheSalt returns body (a JSON object without a top-level cache_salt) with "cache_salt": salt added
// as its first member, for a worker that must hash the request's blocks in the namespace the router
// routed it in. body is not modified.
func SetCacheSalt(body []byte, salt string) ([]byte, error) {
	i := 0
	for i < len(body) && isJSONSpace(body[i]) {
		i++
	}
	if i == len(body) || body[i] != '{' {
		return nil, errors.New("openai: set cache_salt: the body is not a JSON object")
	}
	rest := body[i+1:]
	val, err := json.Marshal(salt)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(val)+16)
	out = append(out, body[:i+1]...)
	out = append(out, `"cache_salt":`...)
	out = append(out, val...)
	if t := bytes.TrimLeft(rest, " \t\r\n"); len(t) > 0 && t[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...), nil
}

func isJSONSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }
