package mocker

import (
	"strconv"
	"unicode/utf8"
)

// The response bodies and stream chunks have one fixed shape, so they are appended by hand: the
// reflective encoder cost a third of the mocker's HTTP handling in the frontend throughput profile. The
// bytes are those encoding/json gives the same values (HTML characters, U+2028/U+2029 and invalid
// UTF-8 escaped the same way).

// respChoice is the one choice of a response or chunk.
type respChoice struct {
	chat   bool   // a message (or delta) rather than a text
	delta  bool   // a chunk: "delta" instead of "message"
	role   string // "" omits the role
	text   string
	finish bool // finish_reason "length" (else null)
}

// appendBody appends {"id","object","created","model","choices":[c?],"usage"?}: choices is empty when
// c is nil, usage is left out when u is nil.
func appendBody(dst []byte, id, object string, created int64, model string, c *respChoice, u *usage) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, id)
	dst = append(dst, `,"object":`...)
	dst = appendJSONString(dst, object)
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, model)
	dst = append(dst, `,"choices":[`...)
	if c != nil {
		dst = append(dst, `{"index":0,`...)
		switch {
		case !c.chat:
			dst = append(dst, `"text":`...)
			dst = appendJSONString(dst, c.text)
		default:
			if c.delta {
				dst = append(dst, `"delta":{`...)
			} else {
				dst = append(dst, `"message":{`...)
			}
			if c.role != "" {
				dst = append(dst, `"role":`...)
				dst = appendJSONString(dst, c.role)
				dst = append(dst, ',')
			}
			dst = append(dst, `"content":`...)
			dst = appendJSONString(dst, c.text)
			dst = append(dst, '}')
		}
		dst = append(dst, `,"logprobs":null,"finish_reason":`...)
		if c.finish {
			dst = append(dst, `"length"`...)
		} else {
			dst = append(dst, `null`...)
		}
		dst = append(dst, `,"stop_reason":null}`...)
	}
	dst = append(dst, ']')
	if u != nil {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
		dst = append(dst, `,"total_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
		dst = append(dst, `,"completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.PromptTokensDetails.CachedTokens), 10)
		dst = append(dst, `}}`...)
	}
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string, escaped as encoding/json does: quote, backslash and
// control characters, <, > and & (HTML-safe), U+2028 and U+2029, and invalid UTF-8 as U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&15])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
