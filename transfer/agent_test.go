package transfer

import (
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
)

// dialRaw pulls d's item and closes the connection without acknowledging (a worker that dies).
func dialRaw(d Descriptor) (func(), error) {
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		return nil, err
	}
	tok, _ := hex.DecodeString(d.Token)
	var req [pullReqLen]byte
	copy(req[:4], pullMagic[:])
	req[4] = pullVersion
	binary.LittleEndian.PutUint32(req[5:], d.Buffer)
	copy(req[9:], tok)
	if _, err := c.Write(req[:]); err != nil {
		c.Close()
		return nil, err
	}
	_, _ = io.CopyN(io.Discard, c, 9+d.Length)
	return func() { c.Close() }, nil
}
