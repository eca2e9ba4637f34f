package faultproxy

import (
	"encoding/binary"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// endSeq is the replay END marker.
const endSeq = ^uint64(0)

// session is one replay request in flight: the requester's identity and the DEALER that carries the
// request to the worker.
type session struct {
	id       []byte
	dealer   *zmq.Socket
	deadline time.Time
}

// runReplay runs the replay pair until the proxy stops. ready is called once with the ROUTER address.
func runReplay(p *Proxy, ready func(addr string, err error)) {
	router, err := zmq.NewSocket(zmq.ROUTER)
	if err != nil {
		ready("", err)
		return
	}
	defer router.Close()
	if err := router.SetLinger(0); err != nil {
		ready("", err)
		return
	}
	if err := router.Bind(p.cfg.ListenReplay); err != nil {
		ready("", err)
		return
	}
	addr, err := router.GetLastEndpoint()
	ready(addr, err)
	if err != nil {
		return
	}
	var sessions []*session
	defer func() {
		for _, s := range sessions {
			s.dealer.Close()
		}
	}()
	for !p.stopped() {
		poller := zmq.NewPoller()
		poller.Add(router, zmq.POLLIN)
		for _, s := range sessions {
			poller.Add(s.dealer, zmq.POLLIN)
		}
		if _, err := poller.Poll(p.cfg.PollInterval); err != nil {
			continue
		}
		// New requests: [id, "", seq8] from the subscriber's DEALER.
		for {
			msg, err := router.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			if len(msg) != 3 || len(msg[1]) != 0 || len(msg[2]) != 8 {
				continue
			}
			s, err := p.openSession(msg[0], msg[2])
			if err != nil {
				p.c.sendErrors.Add(1)
				continue
			}
			sessions = append(sessions, s)
		}
		// Answers: ["", seq8, payload] on each session's DEALER go back to the requester.
		now := time.Now()
		kept := sessions[:0]
		for _, s := range sessions {
			if p.pump(router, s, now) {
				kept = append(kept, s)
				continue
			}
			s.dealer.Close()
		}
		clear(sessions[len(kept):])
		sessions = kept
	}
}

// openSession connects a fresh DEALER to the worker's ROUTER and sends the request on it.
func (p *Proxy) openSession(id, seq8 []byte) (*session, error) {
	d, err := zmq.NewSocket(zmq.DEALER)
	if err != nil {
		return nil, err
	}
	if err := d.SetLinger(0); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.Connect(*p.upReplay.Load()); err != nil {
		d.Close()
		return nil, err
	}
	// The DEALER queues the request until the connection is up (ZMQ_IMMEDIATE is off).
	if _, err := d.SendMessage("", seq8); err != nil {
		d.Close()
		return nil, err
	}
	p.c.replays.Add(1)
	return &session{id: append([]byte(nil), id...), dealer: d, deadline: time.Now().Add(p.cfg.ReplayTimeout)}, nil
}

// pump forwards what s's DEALER received; it reports whether the session stays open.
func (p *Proxy) pump(router *zmq.Socket, s *session, now time.Time) bool {
	for {
		msg, err := s.dealer.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			break
		}
		s.deadline = now.Add(p.cfg.ReplayTimeout)
		if len(msg) != 3 || len(msg[0]) != 0 || len(msg[1]) != 8 {
			continue
		}
		if _, err := router.SendMessage(s.id, "", msg[1], msg[2]); err != nil {
			p.c.sendErrors.Add(1)
			return false
		}
		p.c.replayMsgs.Add(1)
		if binary.BigEndian.Uint64(msg[1]) == endSeq && len(msg[2]) == 0 {
			return false
		}
	}
	if now.After(s.deadline) {
		p.c.replayLost.Add(1)
		return false
	}
	return true
}
