package kvevents

import (
	"fmt"

	zmq "github.com/pebbe/zmq4"
)

// CURVE authentication and encryption of the event plane (ZMQ's CurveZMQ). The engine side (Publisher)
// is the CURVE server: it holds a secret key and its PUB and replay ROUTER sockets accept only CURVE
// handshakes. The router side (Subscriber) is the client: it must know the server's public key, and a
// handshake with any other peer — a process that binds the endpoint without that secret key, or a plain
// publisher — fails, so no rogue process can feed batches into the index. Traffic is encrypted.
//
// Keys are Z85 strings of 40 characters (NewCurveKeypair, or `zmq_curve_keypair`).

// ErrCurve is the class of CURVE setup errors (missing library support, malformed keys).
var ErrCurve = fmt.Errorf("%w: curve", ErrConfig)

// NewCurveKeypair returns a fresh Z85 key pair.
func NewCurveKeypair() (public, secret string, err error) {
	if !zmq.HasCurve() {
		return "", "", fmt.Errorf("%w: libzmq was built without CURVE", ErrCurve)
	}
	return zmq.NewCurveKeypair()
}

// CurvePublicKey derives the public key of a Z85 secret key.
func CurvePublicKey(secret string) (string, error) {
	if len(secret) != 40 {
		return "", fmt.Errorf("%w: a Z85 key has 40 characters, got %d", ErrCurve, len(secret))
	}
	return zmq.AuthCurvePublic(secret)
}

// curveServer makes s a CURVE server with the given secret key ("" leaves s plain).
func curveServer(s *zmq.Socket, secret string) error {
	if secret == "" {
		return nil
	}
	if len(secret) != 40 {
		return fmt.Errorf("%w: server secret key must be 40 Z85 characters", ErrCurve)
	}
	if err := s.SetCurveServer(1); err != nil {
		return fmt.Errorf("%w: %v", ErrCurve, err)
	}
	if err := s.SetCurveSecretkey(secret); err != nil {
		return fmt.Errorf("%w: %v", ErrCurve, err)
	}
	return nil
}

// curveClient makes s a CURVE client of the server with public key serverKey ("" leaves s plain). The
// client's own key pair is ephemeral: the server authenticates itself to us, which is what keeps rogue
// publishers out.
func curveClient(s *zmq.Socket, serverKey string) error {
	if serverKey == "" {
		return nil
	}
	if len(serverKey) != 40 {
		return fmt.Errorf("%w: server public key must be 40 Z85 characters", ErrCurve)
	}
	pub, sec, err := NewCurveKeypair()
	if err != nil {
		return err
	}
	for _, set := range []func() error{
		func() error { return s.SetCurveServerkey(serverKey) },
		func() error { return s.SetCurvePublickey(pub) },
		func() error { return s.SetCurveSecretkey(sec) },
	} {
		if err := set(); err != nil {
			return fmt.Errorf("%w: %v", ErrCurve, err)
		}
	}
	return nil
}
