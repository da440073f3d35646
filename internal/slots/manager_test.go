package slots

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// memTransport is one node's calls on a memory store (the reference
// semantics, not a stand-in for them), cut off at will.
type memTransport struct {
	s    *store.Memory
	r    *rules.Rule
	node string
	cut  atomic.Bool
}

var errCut = errors.New("cut off")

func (t *memTransport) Acquire(ctx context.Context, reqs []Request) ([]Grant, error) {
	if t.cut.Load() {
		return nil, errCut
	}
	var sr []store.AcquireRequest
	for _, r := range reqs {
		sr = append(sr, store.AcquireRequest{Rule: t.r, Key: r.Key, Node: t.node, Want: r.Want, SlotsKept: r.Kept, Seq: r.Seq})
	}
	ls, err := t.s.Acquire(ctx, sr)
	if err != nil {
		return nil, err
	}
	out := make([]Grant, len(ls))
	for i, l := range ls {
		out[i] = Grant{Granted: l.Granted, Share: l.SlotShare, TTL: l.TTL}
	}
	return out, nil
}

func (t *memTransport) Release(ctx context.Context, reqs []Request) error {
	if t.cut.Load() {
		return errCut
	}
	for _, r := range reqs {
		if err := t.s.Release(ctx, []store.Return{{Rule: t.r, Key: r.Key, Node: t.node}}); err != nil {
			return err
		}
	}
	return nil
}

func newRig(t *testing.T) (*clock.Fake, *store.Memory, *rules.Rule) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := store.NewMemory(clk)
	t.Cleanup(func() { s.Close() })
	r := &rules.Rule{Name: "cc", Algorithm: rules.Concurrency, Limit: 4, Lease: rules.LeaseTuning{TTL: time.Second}, MaxHold: 400 * time.Millisecond}
	if err := r.Normalize(); err != nil {
		t.Fatal(err)
	}
	return clk, s, r
}

func newNode(t *testing.T, clk *clock.Fake, s *store.Memory, r *rules.Rule, node string) (*Manager, *memTransport) {
	tr := &memTransport{s: s, r: r, node: node}
	m := NewManager(Config{Transport: tr, Clock: clk, Nodes: func() int { return 2 }, Tick: time.Hour,
		Unreachable: func(err error) bool { return errors.Is(err, errCut) }, Timeout: func() time.Duration { return time.Second }})
	t.Cleanup(m.Close)
	return m, tr
}

// step runs one tick of the loop and waits for what it sent.
func step(m *Manager) {
	m.tick()
	m.sends.Wait()
}

// A node cut off from the allocator stops taking slots on its lease
// max_hold before the lease ends, then takes its fallback of limit/N with
// those in flight counted; the store lends its slots again only once the
// lease has ended, so every slot it took stayed counted for max_hold.
func TestCutOffNodeKeepsMaxHold(t *testing.T) {
	clk, s, r := newRig(t)
	m, tr := newNode(t, clk, s, r, "a")
	k := m.Table(r).Key("k")
	<-k.First()
	for range 4 { // demand grows the lease to the whole limit
		for k.Take() {
		}
		clk.Advance(r.Lease.Refresh)
		step(m)
	}
	if k.Cap() != 4 || k.InFlight() != 4 || k.Mode() != ModeLease {
		t.Fatalf("cap %d, in flight %d, mode %d: want all 4 leased and taken", k.Cap(), k.InFlight(), k.Mode())
	}
	k.Give()
	k.Give() // 2 in flight, 2 free on the lease
	sent := clk.Mono()
	step(m) // the last renewal that arrives: sent now
	tr.cut.Store(true)
	clk.Advance(r.LeaseLife() - time.Millisecond)
	step(m)
	if !k.Take() || k.Mode() != ModeLease {
		t.Fatalf("just before max_hold of the lease's end: no slot taken on the lease (cap %d)", k.Cap())
	}
	clk.Advance(time.Millisecond)
	step(m)
	if k.Mode() != ModeFallback || k.Cap() != 2 || k.Take() {
		t.Fatalf("max_hold before the end: mode %d cap %d, want the fallback of 4/2, full with the 3 in flight", k.Mode(), k.Cap())
	}
	// Another node gets none of a's slots while a's lease lasts in the store.
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "b", Want: 4}})
	if err != nil || ls[0].Granted != 0 {
		t.Fatalf("b before a's lease ended: %v %v", ls, err)
	}
	clk.Advance(sent + r.Lease.TTL - clk.Mono())
	ls, err = s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "b", Want: 4}})
	if err != nil || ls[0].Granted != 4 {
		t.Fatalf("b once a's lease ended: %v %v, want all 4", ls, err)
	}
}

// A node above its share gives slots up as they are released, down to it,
// and the other node grows into them at its next renewal.
func TestDrainToShare(t *testing.T) {
	clk, s, r := newRig(t)
	a, _ := newNode(t, clk, s, r, "a")
	b, _ := newNode(t, clk, s, r, "b")
	ka := a.Table(r).Key("k")
	<-ka.First()
	for range 4 {
		for ka.Take() {
		}
		clk.Advance(r.Lease.Refresh)
		step(a)
	}
	kb := b.Table(r).Key("k")
	<-kb.First()
	for kb.Take() {
	}
	clk.Advance(r.Lease.Refresh)
	step(b)
	step(a) // told its share: 3 of 4, b wanting 1 (it was refused once)
	if ka.Cap() != 4 || kb.Cap() != 0 {
		t.Fatalf("caps a %d b %d: want a's 4 kept while in use", ka.Cap(), kb.Cap())
	}
	ka.Give()
	ka.Give()
	if ka.Cap() != 3 || ka.InFlight() != 2 {
		t.Fatalf("a after two releases: cap %d in flight %d, want the first given up, the second back to its lease", ka.Cap(), ka.InFlight())
	}
	clk.Advance(r.Lease.Refresh)
	step(a)
	kb.Take()
	clk.Advance(r.Lease.Refresh)
	step(b)
	if kb.Cap() != 1 {
		t.Fatalf("b after a drained: cap %d, want the slot a gave up", kb.Cap())
	}
}

// A rule that goes while a slot is in flight keeps the key until the slot
// comes back; then its slots go back to the store.
func TestForgottenRuleGivesBackOnceIdle(t *testing.T) {
	clk, s, r := newRig(t)
	m, _ := newNode(t, clk, s, r, "a")
	k := m.Table(r).Key("k")
	<-k.First()
	if !k.Take() {
		t.Fatal("no slot")
	}
	m.Forget(r.Name)
	if k.Dead() || k.Take() {
		t.Fatalf("the key of a forgotten rule: dead %t, or it took a slot", k.Dead())
	}
	k.Give()
	step(m)
	if !k.Dead() {
		t.Fatal("the key is kept once its slot came back")
	}
	ls, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "b", Want: 4}})
	if err != nil || ls[0].Granted != 4 || ls[0].Holders != 1 {
		t.Fatalf("b after a gave its slots back: %v %v", ls, err)
	}
}

// Whether the allocator answers is what the newest call sent says: a call
// that timed out after a later one was answered is stale, and puts no key
// on its fallback while the allocator answers (docs/bounds.md, rule 1).
// (The simulator's seed 217: a node took a fallback slot 377 ms after its
// cut ended, on a timeout of a call it sent during the cut.)
func TestStaleTimeoutDoesNotTakeTheAllocatorForDown(t *testing.T) {
	clk, s, r := newRig(t)
	tr := &memTransport{s: s, r: r, node: "a"}
	m := NewManager(Config{Transport: tr, Clock: clk, Nodes: func() int { return 2 }, Tick: time.Hour, Stepped: true,
		Unreachable: func(err error) bool { return errors.Is(err, errCut) }, Timeout: func() time.Duration { return time.Second }})
	t.Cleanup(m.Close)
	old := m.Table(r).Key("old")
	first, _ := m.Turn() // t0: old's first call, which will time out
	clk.Advance(100 * time.Millisecond)
	fresh := m.Table(r).Key("fresh")
	second, _ := m.Turn() // t1: fresh's first call, answered
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("calls %d then %d, want one each", len(first), len(second))
	}
	grants, err := tr.Acquire(context.Background(), second[0].Requests)
	if err != nil {
		t.Fatal(err)
	}
	m.Answer(second[0], grants, nil)
	clk.Advance(900 * time.Millisecond)
	m.Answer(first[0], nil, errCut) // t0's call times out after t1's was answered
	if m.Down() {
		t.Fatalf("a timeout of a call sent before an answered one took the allocator for down")
	}
	if old.Mode() == ModeFallback || fresh.Mode() != ModeLease {
		t.Fatalf("modes: old %d, fresh %d; want old off its fallback and fresh on its lease", old.Mode(), fresh.Mode())
	}
	// A later call's failure still counts.
	clk.Advance(time.Millisecond)
	tr.cut.Store(true)
	calls, _ := m.Turn()
	for _, c := range calls {
		m.Answer(c, nil, errCut)
	}
	if len(calls) > 0 && !m.Down() {
		t.Fatalf("a failed call sent after the answered one did not take the allocator for down")
	}
}
