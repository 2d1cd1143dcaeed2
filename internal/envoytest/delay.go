package envoytest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

type timedChunk struct {
	at time.Time
	b  []byte
}

// DelayProxy is a TCP proxy that holds every chunk a client sends for a
// fixed delay before passing it on: a slow network or a slow store in front
// of a real one. Every byte reaches the target the delay after the client sent
// it, so each call through it takes at least the delay.
type DelayProxy struct {
	// Addr is its host:port on 127.0.0.1.
	Addr string

	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// StartDelayProxy proxies a free port to target, delaying client data by
// delay, until the test's cleanup.
func StartDelayProxy(t testing.TB, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	return ListenDelayProxy(t, "127.0.0.1:0", target, delay)
}

// ListenDelayProxy is StartDelayProxy on addr: a store that comes up late
// at an address its clients were given before.
func ListenDelayProxy(t testing.TB, addr, target string, delay time.Duration) *DelayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("envoytest: delay proxy: %v", err)
	}
	p := &DelayProxy{Addr: ln.Addr().String(), ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *DelayProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(in)
		p.track(out)
		p.wg.Add(3)
		go func() { // target → client, as it comes
			defer p.wg.Done()
			_, _ = io.Copy(in, out)
			_ = in.Close()
		}()
		// client → target: each chunk is passed on delay after it arrived,
		// so a request sent in several writes is delayed once, not per write.
		chunks := make(chan timedChunk, 64)
		go func() { // reader: stamps chunks; exits when the client is done
			defer p.wg.Done()
			defer close(chunks)
			for {
				buf := make([]byte, 64<<10)
				n, err := in.Read(buf)
				if n > 0 {
					chunks <- timedChunk{at: time.Now(), b: buf[:n]}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // writer
			defer p.wg.Done()
			defer out.Close()
			for c := range chunks {
				time.Sleep(time.Until(c.at.Add(p.delay)))
				if _, err := out.Write(c.b); err != nil {
					_ = in.Close()
					for range chunks { // let the reader finish
					}
					return
				}
			}
		}()
	}
}
