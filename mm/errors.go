package mm

import "errors"

// Error classes of the package. Callers test them with errors.Is; the wrapped cause says what exactly
// failed.
var (
	// ErrBadURL: the image URL cannot be parsed or serialized (no scheme, bad host or port).
	ErrBadURL = errors.New("mm: bad image url")
	// ErrUnsupportedScheme: size discovery supports only http(s) and data: URLs (s3://, gs:// are hashed
	// but get no routing entry).
	ErrUnsupportedScheme = errors.New("mm: unsupported url scheme")
	// ErrBadDataURI: a data: URI without a comma, with invalid base64, or larger than the configured bound.
	ErrBadDataURI = errors.New("mm: bad data uri")
	// ErrBlockedAddress: the SSRF guard refused the destination (loopback, private, link-local, CGNAT,
	// metadata, ...) and no allow-list entry admits it.
	ErrBlockedAddress = errors.New("mm: blocked address")
	// ErrNoRange: the server answered something other than 206 Partial Content to a Range request; the
	// body is not read.
	ErrNoRange = errors.New("mm: server did not honour range request")
	// ErrHeader: the image header could not be parsed from the fetched prefix (unknown format, corrupt
	// or too much metadata before the frame header).
	ErrHeader = errors.New("mm: image header parse failed")
	// ErrFetch: the size probe failed at the transport level (DNS, connect, timeout, read).
	ErrFetch = errors.New("mm: image fetch failed")
	// ErrLimit: a per-request bound (image count, total pixels) was exceeded.
	ErrLimit = errors.New("mm: request limit exceeded")
	// ErrTooLarge: an image download passed a byte bound: one image's (ResolveConfig.MaxDecodeBytes),
	// the request's total (ResolveConfig.MaxRequestBytes) or the whole in-flight budget
	// (ProbeConfig.MaxFetchBytesInFlight).
	ErrTooLarge = errors.New("mm: image bytes exceed a limit")
	// ErrBusy: the process's budget of image bytes in flight (ProbeConfig.MaxFetchBytesInFlight) had
	// no room for a download, or its budget of pixels being decoded (MaxDecodePixelsInFlight) none for
	// a decode, within ProbeConfig.FetchBudgetWait; the request may be retried.
	ErrBusy = errors.New("mm: image download budget busy")
)

// ErrClosed: the Prober was closed.
var ErrClosed = errors.New("mm: prober closed")
