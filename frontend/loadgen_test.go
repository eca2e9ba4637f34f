package frontend

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// loadConn is one keep-alive HTTP/1.1 connection of BenchmarkRoutedThroughput's load generator. The
// generator shares the process (and the two cores) with the frontend and the simulated workers, so its
// own CPU counts in the benchmark's CPU per request: it writes each request with one write of bytes it
// appends by hand and reads the response with a bufio.Reader, where fasthttp.Client spent ~9 µs of
// user CPU per request on its connection pool, URI parsing and header tables. The requests still go
// over loopback TCP to the real server, one request at a time per connection.
type loadConn struct {
	addr, host string
	nc         net.Conn
	br         *bufio.Reader
	buf        []byte
}

func newLoadConn(addr string) *loadConn { return &loadConn{addr: addr, host: addr} }

// post sends a POST with a JSON body and reads the whole response; it returns the status and the body
// (valid until the next call). A connection error or a Connection: close answer closes the connection;
// the next call dials again.
func (c *loadConn) post(path string, body []byte) (int, []byte, error) {
	if c.nc == nil {
		nc, err := net.Dial("tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.nc, c.br = nc, bufio.NewReaderSize(nc, 16<<10)
	}
	b := append(c.buf[:0], "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.buf = b
	if _, err := c.nc.Write(b); err != nil {
		c.close()
		return 0, nil, err
	}
	status, resp, err := c.readResponse()
	if err != nil {
		c.close()
	}
	return status, resp, err
}

var errLoadResponse = errors.New("loadgen: malformed response")

// readResponse reads a Content-Length response (the frontend's unary answers); chunked bodies are not
// expected here and fail.
func (c *loadConn) readResponse() (int, []byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("%w: status line %q", errLoadResponse, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: status line %q", errLoadResponse, line)
	}
	length, closing := -1, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("%w: header %q", errLoadResponse, line)
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("%w: content-length %q", errLoadResponse, v)
			}
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			return 0, nil, fmt.Errorf("%w: transfer-encoding %q", errLoadResponse, v)
		}
	}
	if length < 0 {
		return 0, nil, fmt.Errorf("%w: no content-length", errLoadResponse)
	}
	body := c.buf[:0]
	if cap(body) < length {
		body = make([]byte, length)
	}
	body = body[:length]
	if _, err := io.ReadFull(c.br, body); err != nil {
		return 0, nil, err
	}
	c.buf = body
	if closing {
		c.close()
	}
	return status, body, nil
}

func (c *loadConn) close() {
	if c.nc != nil {
		c.nc.Close()
		c.nc, c.br = nil, nil
	}
}
