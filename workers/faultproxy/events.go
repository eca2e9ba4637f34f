package faultproxy

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// held is a batch waiting to be sent: a delayed one (until at) or a reordered one (after the next send,
// or at at, whichever comes first).
type held struct {
	msg     [][]byte
	at      time.Time
	reorder bool
}

// eventPair is the state of the events goroutine: everything here is owned by it.
type eventPair struct {
	p        *Proxy
	sub, pub *zmq.Socket
	addr     string // the bound PUB address, reused by the rebind after a cut
	upstream string // the endpoint the SUB is connected to

	faults   *Faults
	rng      *rand.Rand
	hold     []held
	cutUntil time.Time
}

// runEvents runs the event pair until the proxy stops. ready is called once, after the sockets are
// open (with the PUB address) or failed.
func runEvents(p *Proxy, ready func(addr string, err error)) {
	e := &eventPair{p: p}
	defer e.close()
	if err := e.open(); err != nil {
		ready("", err)
		return
	}
	ready(e.addr, nil)
	for !p.stopped() {
		e.step()
	}
}

func (e *eventPair) open() error {
	cfg := &e.p.cfg
	sub, err := zmq.NewSocket(zmq.SUB)
	if err != nil {
		return err
	}
	e.sub = sub
	for _, set := range []func() error{
		func() error { return sub.SetLinger(0) },
		func() error { return sub.SetRcvhwm(cfg.HWM) },
		// Reconnect fast to a restarted worker (ZMQ's default is 100ms).
		func() error { return sub.SetReconnectIvl(20 * time.Millisecond) },
		func() error { return sub.SetReconnectIvlMax(200 * time.Millisecond) },
		func() error { return sub.SetSubscribe(cfg.Topic) },
		func() error { return sub.Connect(cfg.Upstream) },
	} {
		if err := set(); err != nil {
			return err
		}
	}
	pub, err := bindPub(cfg.Listen, cfg.HWM)
	if err != nil {
		return err
	}
	e.pub = pub
	e.addr, err = pub.GetLastEndpoint()
	e.upstream = cfg.Upstream
	return err
}

func bindPub(addr string, hwm int) (*zmq.Socket, error) {
	pub, err := zmq.NewSocket(zmq.PUB)
	if err != nil {
		return nil, err
	}
	if err := pub.SetLinger(0); err != nil {
		pub.Close()
		return nil, err
	}
	if err := pub.SetSndhwm(hwm); err != nil {
		pub.Close()
		return nil, err
	}
	if err := pub.Bind(addr); err != nil {
		pub.Close()
		return nil, err
	}
	return pub, nil
}

func (e *eventPair) close() {
	if e.sub != nil {
		e.sub.Close()
	}
	if e.pub != nil {
		e.pub.Close()
	}
}

// step polls once and handles what arrived, cut requests and due held batches.
func (e *eventPair) step() {
	now := time.Now()
	e.handleCuts(now)
	if up := *e.p.upstream.Load(); up != e.upstream {
		_ = e.sub.Disconnect(e.upstream)
		if err := e.sub.Connect(up); err != nil {
			e.p.c.sendErrors.Add(1)
		}
		e.upstream = up
	}
	wait := e.p.cfg.PollInterval
	poller := zmq.NewPoller()
	poller.Add(e.sub, zmq.POLLIN)
	if _, err := poller.Poll(wait); err != nil {
		return
	}
	for i := 0; i < 1024; i++ {
		msg, err := e.sub.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if !errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
				e.p.c.sendErrors.Add(1)
			}
			break
		}
		e.onMessage(msg, time.Now())
	}
	e.releaseDue(time.Now())
}

// handleCuts starts or extends a cut on request, and ends one that is over.
func (e *eventPair) handleCuts(now time.Time) {
	for {
		select {
		case d := <-e.p.cuts:
			if d > 0 {
				e.p.c.cuts.Add(1)
			}
			if d > 0 && e.pub != nil {
				e.pub.Close()
				e.pub = nil
			}
			e.p.c.cutDropped.Add(uint64(len(e.hold)))
			e.hold = e.hold[:0]
			switch until := now.Add(d); {
			case d <= 0:
				e.cutUntil = now // Cut(0) ends the cut
			case until.After(e.cutUntil):
				e.cutUntil = until
			}
			continue
		default:
		}
		break
	}
	if e.pub == nil && !now.Before(e.cutUntil) {
		pub, err := bindPub(e.addr, e.p.cfg.HWM)
		if err != nil {
			e.p.c.rebindFails.Add(1) // the port may linger for a moment; retried next step
			return
		}
		e.pub = pub
	}
}

// onMessage applies the fault of one batch from the worker.
func (e *eventPair) onMessage(msg [][]byte, now time.Time) {
	e.p.c.received.Add(1)
	if e.pub == nil {
		e.p.c.cutDropped.Add(1)
		return
	}
	if len(msg) != 3 || len(msg[1]) != 8 {
		e.send(msg)
		return
	}
	seq := binary.BigEndian.Uint64(msg[1])
	// Faults are read per batch: a SetFaults that returned applies to every batch received after it.
	if f := e.p.faults.Load(); f != e.faults {
		e.faults, e.rng = f, newRNG(f.Seed)
	}
	switch e.faults.decide(seq, e.rng) {
	case Drop:
		e.p.c.dropped.Add(1)
	case Duplicate:
		e.p.c.duplicated.Add(1)
		e.send(msg)
		e.send(msg)
		e.releaseReordered()
	case Reorder:
		e.p.c.reordered.Add(1)
		e.hold = append(e.hold, held{msg: msg, at: now.Add(e.faults.delayFor()), reorder: true})
	case Delay:
		e.p.c.delayed.Add(1)
		e.hold = append(e.hold, held{msg: msg, at: now.Add(e.faults.delayFor())})
	default:
		e.send(msg)
		e.releaseReordered()
	}
}

// releaseReordered sends the batches held for reordering, now that a later batch went first.
func (e *eventPair) releaseReordered() {
	kept := e.hold[:0]
	for _, h := range e.hold {
		if h.reorder {
			e.send(h.msg)
			continue
		}
		kept = append(kept, h)
	}
	clear(e.hold[len(kept):])
	e.hold = kept
}

// releaseDue sends the held batches whose time has come.
func (e *eventPair) releaseDue(now time.Time) {
	kept := e.hold[:0]
	for _, h := range e.hold {
		if !now.Before(h.at) {
			e.send(h.msg)
			continue
		}
		kept = append(kept, h)
	}
	clear(e.hold[len(kept):])
	e.hold = kept
}

func (e *eventPair) send(msg [][]byte) {
	if e.pub == nil {
		e.p.c.cutDropped.Add(1)
		return
	}
	for i, f := range msg {
		flag := zmq.SNDMORE
		if i == len(msg)-1 {
			flag = 0
		}
		if _, err := e.pub.SendBytes(f, flag); err != nil {
			e.p.c.sendErrors.Add(1)
			return
		}
	}
	e.p.c.forwarded.Add(1)
}
