// Package netdelay is a TCP proxy on the loopback that puts distance
// between two programs: it delays every byte by half a round trip each way,
// or cuts the link. Tests and the bench put it between nodes and the
// allocator; it is an instrument, never part of a deployment.
package netdelay

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its own loopback address to a target,
// each direction through a delay line: a byte read at t is written at
// t + roundTrip/2 (or later, to keep the stream in order), at full
// throughput, since the line holds what is in flight.
type Proxy struct {
	ln     net.Listener
	target string
	oneWay atomic.Int64 // ns
	cut    atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// maxInFlight bounds the chunks a delay line holds; a reader that would
// exceed it waits, as a full network would make the sender wait.
const maxInFlight = 4096

// Start listens on 127.0.0.1 and forwards to target with the given round
// trip. Close stops it.
func Start(target string, roundTrip time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.SetRoundTrip(roundTrip)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetRoundTrip changes the delay of the bytes read from now on.
func (p *Proxy) SetRoundTrip(d time.Duration) { p.oneWay.Store(int64(max(d, 0) / 2)) }

// Cut stops every byte from crossing while on, as a network that drops
// the traffic: the connections stay open and hear nothing. Restoring the
// link closes the connections that were cut, whose streams lost bytes;
// the programs reconnect.
func (p *Proxy) Cut(on bool) {
	if p.cut.Swap(on) == on || on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// track registers a pair of connections, unless the proxy is closed.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies from to to through a delay line; when either side ends, both
// connections close.
func (p *Proxy) pipe(from, to net.Conn) {
	defer p.wg.Done()
	line := make(chan chunk, maxInFlight)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range line {
			if wait := time.Until(c.at); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := to.Write(c.data); err != nil {
				break
			}
		}
		p.forget(to)
		p.forget(from)
		for range line { // let the reader finish
		}
	}()
	var last time.Time
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.cut.Load() {
			at := time.Now().Add(time.Duration(p.oneWay.Load()))
			if at.Before(last) {
				at = last // a shorter delay must not reorder the stream
			}
			last = at
			line <- chunk{data: append([]byte(nil), buf[:n]...), at: at}
		}
		if err != nil { // EOF, a reset, or closed by the other direction
			break
		}
	}
	close(line)
	<-done
}
