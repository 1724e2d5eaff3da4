package testenv

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy that injects network faults: it can cut every
// connection and refuse new ones (a partition), or hold back every chunk
// it forwards (a slow link). Its target is asked for each new connection,
// so that it can follow a moving endpoint, as a Service does.
type Proxy struct {
	ln     net.Listener
	target func() string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	down   bool
	delay  time.Duration
}

// StartProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target(); an empty target refuses it.
func StartProxy(target func() string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

// To is a fixed target.
func To(addr string) func() string { return func() string { return addr } }

// Addr is host:port to connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port Addr listens on.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Target is where a connection made now would be forwarded ("" refused).
func (p *Proxy) Target() string { return p.target() }

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		target := p.target()
		if down || target == "" {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(in, out)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = true
	}
}

// pipe copies src to dst, late by the current delay, until either closes.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.delay
			p.mu.Unlock()
			time.Sleep(delay)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every open connection and refuses new ones until Restore;
// it returns how many connections it closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	n := len(p.conns)
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	return n
}

// Restore accepts connections again.
func (p *Proxy) Restore() { p.mu.Lock(); p.down = false; p.mu.Unlock() }

// Slow delays every chunk forwarded by d.
func (p *Proxy) Slow(d time.Duration) { p.mu.Lock(); p.delay = d; p.mu.Unlock() }
