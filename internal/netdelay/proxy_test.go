package netdelay

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echo serves on 127.0.0.1 and writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// A line through the proxy comes back after a round trip, and a stream of
// lines keeps its order and its throughput: the proxy is a delay line, not
// a stop-and-wait.
func TestProxyDelaysByTheRoundTrip(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the others
	p, err := Start(echo(t), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p)
	start := time.Now()
	const n = 200
	for i := range n {
		fmt.Fprintf(c, "line %d\n", i)
	}
	for i := range n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("line %d\n", i); line != want {
			t.Fatalf("got %q, want %q: the stream was reordered", line, want)
		}
		if i == 0 {
			if took := time.Since(start); took < 100*time.Millisecond {
				t.Fatalf("first echo after %v, under the 100ms round trip", took)
			}
		}
	}
	// 200 lines sent at once arrive about one round trip later, not 200.
	t.Logf("200 pipelined lines echoed in %v through a 100ms round trip", time.Since(start))
	if took := time.Since(start); took > 100*time.Millisecond*n/10 {
		t.Fatalf("200 lines took %v: the proxy waits for each", took)
	}
	c.Close()
}

// A cut link carries nothing; restoring it closes the cut connections, and
// new ones work.
func TestProxyCut(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs after the others
	p, err := Start(echo(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p)
	p.Cut(true)
	fmt.Fprintln(c, "lost")
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read %q over a cut link", line)
	}
	p.Cut(false)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("a connection that was cut still carries bytes after the link came back")
	}
	d, rd := dial(t, p)
	fmt.Fprintln(d, "back")
	d.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "back\n" {
		t.Fatalf("after the link came back: %q, %v", line, err)
	}
	d.Close()
	c.Close()
}
