package frontend

import (
	"errors"
	"strconv"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/frontend/openai"
)

// Error classes the edge maps to HTTP statuses. Handlers wrap a cause with one of them (%w); writeError
// picks the status with errors.Is, so the mapping lives in one place. The request classes are the
// frontend/openai sentinels themselves (that package cannot import this one), so errors from
// openai.Validate map here unchanged.
var (
	ErrBadRequest    = openai.ErrBadRequest
	ErrNotFound      = openai.ErrNotFound
	ErrTooLarge      = openai.ErrTooLarge
	ErrUnprocessable = openai.ErrUnprocessable
	ErrUnavailable   = openai.ErrUnavailable
	ErrUnauthorized  = errors.New("unauthorized")
	// ErrForbidden: an admin or router-API call from a non-loopback client with no token configured (403).
	ErrForbidden = errors.New("forbidden")
	// ErrRequestTimeout: the request body did not arrive within its deadline (408).
	ErrRequestTimeout = errors.New("request timeout")
	// ErrTooMany: the server is at its concurrent-request limit (429).
	ErrTooMany = errors.New("too many requests")
	// ErrHeaderTooLarge: request headers past the limit (431).
	ErrHeaderTooLarge = errors.New("request headers too large")
	ErrMethod         = errors.New("method not allowed")
	// ErrTimeout: the request did not complete within --request-timeout (504).
	ErrTimeout = errors.New("timeout")
	// ErrMediaType: an OpenAI call whose body is not declared application/json (415), as vLLM and
	// Dynamo refuse it.
	ErrMediaType = errors.New("unsupported media type")
	// ErrOverloaded: the request's router policy class has its queue at a limit (529, Dynamo's
	// QueueRejected); the client may retry later.
	ErrOverloaded = errors.New("overloaded")
)

// StatusOverloaded is 529, the non-standard "site is overloaded" status Dynamo answers a rejected
// queue admission with.
const StatusOverloaded = 529

// apiError is the OpenAI error body: {"error":{"message","type","param","code"}}.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// statusOf maps an error to its HTTP status and OpenAI error type.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrBadRequest):
		return fasthttp.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, ErrNotFound):
		return fasthttp.StatusNotFound, "not_found_error"
	case errors.Is(err, ErrTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, ErrUnprocessable):
		return fasthttp.StatusUnprocessableEntity, "invalid_request_error"
	case errors.Is(err, ErrUnavailable):
		return fasthttp.StatusServiceUnavailable, "service_unavailable_error"
	case errors.Is(err, ErrTooMany):
		return fasthttp.StatusTooManyRequests, "rate_limit_error"
	case errors.Is(err, ErrHeaderTooLarge):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "invalid_request_error"
	case errors.Is(err, ErrUnauthorized):
		return fasthttp.StatusUnauthorized, "authentication_error"
	case errors.Is(err, ErrForbidden):
		return fasthttp.StatusForbidden, "permission_error"
	case errors.Is(err, ErrRequestTimeout):
		return fasthttp.StatusRequestTimeout, "invalid_request_error"
	case errors.Is(err, ErrMethod):
		return fasthttp.StatusMethodNotAllowed, "invalid_request_error"
	case errors.Is(err, ErrTimeout):
		return fasthttp.StatusGatewayTimeout, "timeout_error"
	case errors.Is(err, ErrMediaType):
		return fasthttp.StatusUnsupportedMediaType, "invalid_request_error"
	case errors.Is(err, ErrOverloaded):
		return StatusOverloaded, "overloaded_error"
	}
	return fasthttp.StatusInternalServerError, "internal_server_error"
}

// writeError writes err as an OpenAI-style error with the status its class maps to.
func writeError(ctx *fasthttp.RequestCtx, err error) {
	status, body := ErrorResponse(err)
	if status == fasthttp.StatusTooManyRequests {
		ctx.Response.Header.Set("Retry-After", "1") // every 429 is a momentary state of the frontend
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
}

// methodNotAllowed writes err (an ErrMethod) with the Allow header RFC 9110 asks of a 405: the methods
// the path serves.
func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string, err error) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, err)
}

// writeJSON writes v as a 200 JSON response.
func writeJSON(ctx *fasthttp.RequestCtx, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, err)
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(body)
}

// decodeBody unmarshals the request body into v, rejecting empty bodies, bad JSON and trailing data.
func decodeBody(ctx *fasthttp.RequestCtx, v any) error {
	body := ctx.PostBody()
	if len(body) == 0 {
		return errorf(ErrBadRequest, "request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(ErrBadRequest, "invalid JSON body: %v", err)
	}
	return nil
}

// parseID reads a decimal u64 path segment.
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errorf(ErrBadRequest, "worker id %q is not an unsigned integer", s)
	}
	return id, nil
}
