package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// rig drives one node's Core by hand against the real allocator service
// over a memory store, on one fake clock: the node's monotonic clock and
// the store's. A call leaves at a Turn and is answered (or failed) when
// the test says, so every instant is the test's.
type rig struct {
	t     *testing.T
	set   *rules.Set
	clk   *clock.Fake
	st    *store.Memory
	srv   *server.Server
	core  *Core
	node  string
	out   []*Call // sent, not yet answered
	sent  [][]Request
	rets  []Return // what Releases gave back
	start time.Duration
}

// testRules are the rules the rigs use.
const testRules = `
rules:
  - name: r
    algorithm: token_bucket
    limit: 1000
    period: 1s
    burst: 1000
    lease: { min: 10, max: 500, ttl: 1s, refresh: 100ms }
  - name: api
    algorithm: token_bucket
    limit: 1000
    period: 1m
    burst: 200
  - name: small
    algorithm: token_bucket
    limit: 20
    period: 1s
    burst: 5
    lease: { ttl: 2s }
  - name: win
    algorithm: fixed_window
    limit: 100
    period: 1s
    lease: { ttl: 2s }
  - name: closed
    algorithm: token_bucket
    limit: 100
    period: 1s
    failure: closed
`

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newRig(t *testing.T, configure func(*Config)) *rig {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	st := store.NewMemory(clk)
	t.Cleanup(func() { st.Close() })
	srv, err := server.New(server.Config{Store: st, Rules: set, Clock: clk, Logger: quiet, NewKeysPerNode: -1})
	if err != nil {
		t.Fatal(err)
	}
	// No pacing between calls: each step is a call of its own.
	cfg := Config{Logger: quiet, Rand: rand.New(rand.NewPCG(1, 2)), CallGap: time.Nanosecond, Sweep: 10 * time.Millisecond}
	if configure != nil {
		configure(&cfg)
	}
	g := &rig{t: t, set: set, clk: clk, st: st, srv: srv, node: "n1", start: clk.Mono()}
	g.core = NewCore(cfg, clk.Mono())
	return g
}

func (g *rig) table(name string) *Table {
	r, ok := g.set.Get(name)
	if !ok {
		g.t.Fatalf("no rule %q", name)
	}
	return g.core.Table(r)
}

func (g *rig) key(rule, key string) *KeyLease { return g.table(rule).Key(key) }

// now is the node's monotonic clock.
func (g *rig) now() time.Duration { return g.clk.Mono() }

// to moves the clock to at (from the rig's start) and turns the Core.
func (g *rig) to(at time.Duration) {
	g.t.Helper()
	if d := g.start + at - g.now(); d > 0 {
		g.clk.Advance(d)
	}
	g.turn()
}

// turn runs the Core at now and takes the calls it makes; Releases reach
// the store at once.
func (g *rig) turn() {
	g.core.Turn(g.now())
	calls, rels := g.core.TakeCalls()
	for _, c := range calls {
		g.out = append(g.out, c)
		g.sent = append(g.sent, c.Requests)
	}
	for _, rets := range rels {
		g.rets = append(g.rets, rets...)
		if _, err := g.srv.Release(context.Background(), ReleaseProto(g.node, rets)); err != nil {
			g.t.Fatalf("release: %v", err)
		}
	}
}

// answer applies every call out at the store now and brings the answers
// back now, then turns the Core.
func (g *rig) answer() {
	g.t.Helper()
	out := g.out
	g.out = nil
	for _, c := range out {
		resp, err := g.srv.Acquire(context.Background(), AcquireProto(g.node, c.Requests))
		if err != nil {
			if status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.NotFound {
				err = &Rejection{Request: -1, Err: err}
			}
			g.core.Answer(c, Answer{}, err, 0, g.now())
			continue
		}
		g.core.Answer(c, AnswerOf(resp), nil, time.Millisecond, g.now())
	}
	g.turn()
}

var errCut = errors.New("allocator unreachable")

// fail fails every call out, as an unreachable allocator does, and turns.
func (g *rig) fail() {
	out := g.out
	g.out = nil
	for _, c := range out {
		g.core.Answer(c, Answer{}, errCut, 0, g.now())
	}
	g.turn()
}

// decide decides n tokens of key under rule now, and turns the Core, as
// the inbox wakes the Manager's loop.
func (g *rig) decide(rule, key string, n int64) Verdict {
	v := g.key(rule, key).Decide(n, g.now(), g.clk.Now(), 1, false)
	g.turn()
	return v
}

// step is one named instant of a table: what happens, and what must hold.
type step struct {
	name string
	at   time.Duration
	do   func(*rig)
	want func(*rig) error
}

func (g *rig) run(steps []step) {
	g.t.Helper()
	for _, s := range steps {
		g.to(s.at)
		if s.do != nil {
			s.do(g)
		}
		if s.want != nil {
			if err := s.want(g); err != nil {
				g.t.Fatalf("%s (at %v): %v", s.name, s.at, err)
			}
		}
	}
}

// verdict checks a decision's outcome.
func verdict(v Verdict, allowed, fallback, wait bool) error {
	if v.Allowed != allowed || v.Fallback != fallback || v.Wait != wait {
		return fmt.Errorf("verdict %+v, want allowed=%v fallback=%v wait=%v", v, allowed, fallback, wait)
	}
	return nil
}
