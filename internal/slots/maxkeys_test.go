package slots

import (
	"errors"
	"testing"
	"time"
)

// A node holds the slots of at most Config.MaxKeys keys: a new key beyond
// gets none until an idle key goes, and each refusal is counted.
func TestMaxKeysCapsTheKeys(t *testing.T) {
	clk, s, r := newRig(t)
	tr := &memTransport{s: s, r: r, node: "a"}
	m := NewManager(Config{Transport: tr, Clock: clk, Nodes: func() int { return 2 }, Tick: time.Hour, MaxKeys: 2,
		Unreachable: func(err error) bool { return errors.Is(err, errCut) }, Timeout: func() time.Duration { return time.Second }})
	t.Cleanup(m.Close)
	tb := m.Table(r)
	a, b := tb.Key("a"), tb.Key("b")
	if a == nil || b == nil {
		t.Fatalf("keys a %v, b %v under a cap of 2", a, b)
	}
	<-a.First()
	<-b.First()
	if tb.Key("c") != nil || m.OverCap() != 1 || m.Keys() != 2 {
		t.Fatalf("a third key under a cap of 2: over cap %d, keys %d", m.OverCap(), m.Keys())
	}
	if !b.Take() {
		t.Fatal("b took no slot")
	}
	// a idle for a TTL goes; b, with a slot in flight, stays.
	for range 8 {
		step(m)
		clk.Advance(r.Lease.TTL / 2)
	}
	if !a.Dead() || b.Dead() || m.Keys() != 1 {
		t.Fatalf("after a TTL idle: a dead %t, b dead %t, keys %d", a.Dead(), b.Dead(), m.Keys())
	}
	if tb.Key("c") == nil || m.Keys() != 2 {
		t.Fatalf("no room for c once a went: keys %d", m.Keys())
	}
	b.Give()
}
