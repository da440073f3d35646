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
	// nodes is the fleet size: what Config.Nodes says (unless a test
	// configures its own) and what decide's fallback divides by.
	nodes int
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
  - name: win10
    algorithm: fixed_window
    limit: 100
    period: 10s
    lease: { ttl: 1s }
  - name: narrow
    algorithm: token_bucket
    limit: 5000
    period: 1s
    burst: 50
    lease: { ttl: 2s, refresh: 150ms }
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
	g := &rig{t: t, set: set, clk: clk, st: st, srv: srv, node: "n1", start: clk.Mono(), nodes: 1}
	// No pacing between calls: each step is a call of its own.
	cfg := Config{Logger: quiet, Rand: rand.New(rand.NewPCG(1, 2)), CallGap: time.Nanosecond, Sweep: 10 * time.Millisecond,
		Nodes: func() int { return g.nodes }}
	if configure != nil {
		configure(&cfg)
	}
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

// through moves the clock to at as the Manager's loop would: turning the
// Core at every instant NextWake names on the way (its deadlines, sweeps
// and calls, each at its own time), then at at. The calls made on the way
// stay out.
func (g *rig) through(at time.Duration) {
	g.t.Helper()
	for range 100_000 {
		wake, ok := g.core.NextWake()
		if !ok || wake-g.start >= at {
			break
		}
		if wake <= g.now() { // (due now: a turn left work for this instant)
			g.turn()
			if w, ok := g.core.NextWake(); ok && w <= g.now() {
				g.t.Fatalf("the Core wants to wake at %v again after a turn at %v", w-g.start, g.now()-g.start)
			}
			continue
		}
		g.to(wake - g.start)
	}
	g.to(at)
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
		g.bring(c)
	}
	g.turn()
}

// answerCall answers only the i-th call out (in the order they left), as
// answer does; the others stay out.
func (g *rig) answerCall(i int) {
	g.t.Helper()
	if i >= len(g.out) {
		g.t.Fatalf("answerCall(%d): %d calls out", i, len(g.out))
	}
	c := g.out[i]
	g.out = append(g.out[:i:i], g.out[i+1:]...)
	g.bring(c)
	g.turn()
}

// bring applies one call at the store now and brings its answer back now.
func (g *rig) bring(c *Call) {
	ans, err := g.apply(c)
	took := time.Millisecond
	if err != nil {
		took = 0
	}
	g.core.Answer(c, ans, err, took, g.now())
}

// apply has the allocator apply one call now: what the node would get back.
func (g *rig) apply(c *Call) (Answer, error) {
	resp, err := g.srv.Acquire(context.Background(), AcquireProto(g.node, c.Requests))
	if err != nil {
		if status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.NotFound {
			err = &Rejection{Request: -1, Err: err}
		}
		return Answer{}, err
	}
	return AnswerOf(resp), nil
}

// lose has the store apply every call out, and loses the answers on their
// way back: the node sees each call fail as an unreachable allocator does.
// It returns what the store answered, call by call.
func (g *rig) lose() []Answer {
	g.t.Helper()
	out := g.out
	g.out = nil
	var lost []Answer
	for _, c := range out {
		ans, err := g.apply(c)
		if err != nil {
			g.t.Fatalf("lose: the store refused the call: %v", err)
		}
		lost = append(lost, ans)
		g.core.Answer(c, Answer{}, errCut, 0, g.now())
	}
	g.turn()
	return lost
}

// reject has the allocator refuse every call out before the store sees it:
// naming request i of each, or the call as a whole when i is -1; then it
// turns.
func (g *rig) reject(i int) {
	out := g.out
	g.out = nil
	for _, c := range out {
		g.core.Answer(c, Answer{}, &Rejection{Request: i, Err: errRefused}, 0, g.now())
	}
	g.turn()
}

var errRefused = errors.New("refused by the allocator")

// acquireAs asks the allocator for a lease on key as another node, now:
// another holder of the key.
func (g *rig) acquireAs(node, rule, key string, want int64, rate float64) Grant {
	g.t.Helper()
	return g.requestAs(node, Request{Rule: rule, Key: key, Want: want, WantRate: rate})
}

// requestAs sends one request to the allocator as another node, now (a
// report of what it admitted on its fallback, say).
func (g *rig) requestAs(node string, req Request) Grant {
	g.t.Helper()
	resp, err := g.srv.Acquire(context.Background(), AcquireProto(node, []Request{req}))
	if err != nil {
		g.t.Fatalf("%s's acquire: %v", node, err)
	}
	return AnswerOf(resp).Grants[0]
}

// requests is every request the node sent for key, in the order they
// left.
func (g *rig) requests(key string) []Request {
	var out []Request
	for _, reqs := range g.sent {
		for _, r := range reqs {
			if r.Key == key {
				out = append(out, r)
			}
		}
	}
	return out
}

// last is the last request the node sent for key.
func (g *rig) last(key string) (Request, error) {
	reqs := g.requests(key)
	if len(reqs) == 0 {
		return Request{}, fmt.Errorf("no request sent for %q", key)
	}
	return reqs[len(reqs)-1], nil
}

// callKeys is the keys of each call out, in the order the calls left.
func (g *rig) callKeys() [][]string {
	var out [][]string
	for _, c := range g.out {
		var keys []string
		for _, r := range c.Requests {
			keys = append(keys, r.Key)
		}
		out = append(out, keys)
	}
	return out
}

// returned is the last Return the node's Releases made of key, and whether
// any named it.
func (g *rig) returned(key string) (Return, bool) {
	for i := len(g.rets) - 1; i >= 0; i-- {
		if g.rets[i].Key == key {
			return g.rets[i], true
		}
	}
	return Return{}, false
}

var errCut = errors.New("allocator unreachable")

// fail fails every call out, as an unreachable allocator does, and turns.
func (g *rig) fail() { g.failWith(errCut) }

// failWith fails every call out with err, and turns.
func (g *rig) failWith(err error) {
	out := g.out
	g.out = nil
	for _, c := range out {
		g.core.Answer(c, Answer{}, err, 0, g.now())
	}
	g.turn()
}

// decide decides n tokens of key under rule now, and turns the Core, as
// the inbox wakes the Manager's loop.
func (g *rig) decide(rule, key string, n int64) Verdict {
	v := g.key(rule, key).Decide(n, g.now(), g.clk.Now(), g.nodes, FirstAttempt)
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

// run runs the steps in order, each at its instant: the clock gets there as
// the Manager's would, the Core turning at each of its deadlines on the way.
func (g *rig) run(steps []step) {
	g.t.Helper()
	for _, s := range steps {
		g.through(s.at)
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
