package chaos

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/allot-dev/allot/client"
)

// runLength is a scenario's run at full scale; `make test` runs them at
// shortScale.
const (
	runLength  = 12 * time.Second
	shortScale = 0.5
)

// scenario is one fault under load.
type scenario struct {
	name  string // {lasting} stands for the fault's length
	short bool   // also run, shortened, by `make test`
	top   topology
	// The fault begins at at and ends lasting later, at full scale
	// (lasting 0: a single step). end may be nil.
	at, lasting time.Duration
	begin, end  func(e *env)
	// outage: the nodes lose the allocator for longer than a lease: they
	// must fall back (failure: open) and refuse (failure: closed).
	outage bool
	// onLeases: nodes must make no fallback decision from the first second
	// on: the fault must not reach them.
	onLeases bool
	// excess is what the fault may add to the bound of every window, and
	// why; nil: nothing, the bound of docs/design.md (guarantee 2) as it is.
	excess func(e *env, m *measure) (float64, string)
	// check asserts what else the scenario promises, and returns notes
	// for the table.
	check func(t *testing.T, e *env, m *measure) string
}

// The scenarios of issue 10, in the table's order.
func scenarios() []*scenario {
	return []*scenario{
		{
			name: "allocator kill -9, restarted {lasting} later", short: true,
			top: topology{allocators: 1}, at: 3 * time.Second, lasting: 3 * time.Second,
			begin:  func(e *env) { e.allocs[0].kill() },
			end:    func(e *env) { e.allocs[0].start() },
			outage: true,
		},
		{
			name: "allocator SIGSTOP for {lasting} (one allocator)",
			top:  topology{allocators: 1}, at: 3 * time.Second, lasting: 5 * time.Second,
			begin:  func(e *env) { e.allocs[0].signal(syscall.SIGSTOP) },
			end:    func(e *env) { e.allocs[0].signal(syscall.SIGCONT) },
			outage: true,
		},
		stopOneOfTwo(),
		{
			name: "Redis kill -9, restarted empty {lasting} later",
			top:  topology{allocators: 1}, at: 3 * time.Second, lasting: 3 * time.Second,
			begin:  func(e *env) { e.redis.Kill() },
			end:    func(e *env) { e.redis.Restart(e.t) },
			outage: true,
		},
		flushAll(),
		{
			name: "Redis SIGSTOP for {lasting}",
			top:  topology{allocators: 1}, at: 3 * time.Second, lasting: 5 * time.Second,
			begin:  func(e *env) { e.redis.Pause(e.t) },
			end:    func(e *env) { e.redis.Resume() },
			outage: true,
		},
		slowStore(50*time.Millisecond, false),
		slowStore(150*time.Millisecond, true),
		{
			name: "node clocks stepped ±30 s (4 ahead, 4 behind), back {lasting} later", short: true,
			top: topology{allocators: 1}, at: 3 * time.Second, lasting: 5 * time.Second,
			begin:    func(e *env) { stepNodes(e, 30*time.Second) },
			end:      func(e *env) { stepNodes(e, -30*time.Second) },
			onLeases: true,
		},
		{
			name: "store clock stepped back 30 s (memory store, token bucket)",
			top:  topology{}, at: 4 * time.Second,
			begin:    func(e *env) { e.storeClock.Step(-30 * time.Second) },
			onLeases: true,
		},
		{
			name: "store clock stepped back 1.5 s, across a window boundary (memory store, fixed window)",
			top:  topology{window: true}, at: 4 * time.Second,
			begin: func(e *env) { e.storeClock.Step(-1500 * time.Millisecond) },
			check: checkWindows,
		},
		{
			name: "node 0 cut off by its proxy for {lasting} (traffic dropped)",
			top:  topology{allocators: 1, proxied: true}, at: 3 * time.Second, lasting: 5 * time.Second,
			begin: func(e *env) { e.proxies[0].Cut(true) },
			end:   func(e *env) { e.proxies[0].Cut(false) },
			check: checkCutNode,
			excess: func(e *env, m *measure) (float64, string) {
				return m.open.Rate() / nodes * m.faultEnd.Sub(m.faultStart).Seconds(),
					"rate/N·cut, the cut node's fallback allowance on top of the rate the others lease"
			},
		},
		churn(),
		lostReplies(),
	}
}

// flushAll empties Redis under load: the central state, the holders and
// their shares, and the scripts are forgotten at once.
func flushAll() *scenario {
	var keys int64
	return &scenario{
		name: "Redis FLUSHALL", short: true,
		top: topology{allocators: 1}, at: 4 * time.Second,
		begin: func(e *env) {
			rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
			defer rdb.Close()
			ctx := context.Background()
			var err error
			if keys, err = rdb.DBSize(ctx).Result(); err == nil {
				err = rdb.FlushAll(ctx).Err()
			}
			if err != nil {
				e.t.Fatalf("FLUSHALL: %v", err)
			}
		},
		check: func(t *testing.T, e *env, m *measure) string {
			if keys == 0 {
				t.Errorf("FLUSHALL found no keys to forget")
			}
			return fmt.Sprintf("%d keys flushed", keys)
		},
	}
}

// stepNodes steps half the nodes' wall clocks by d and the other half's
// by -d.
func stepNodes(e *env, d time.Duration) {
	for i, c := range e.clocks {
		if i < len(e.clocks)/2 {
			c.Step(d)
		} else {
			c.Step(-d)
		}
	}
}

// slowStore puts a delay between the allocator and Redis: below the
// allocator's store timeout (100ms) the nodes must not notice but for
// longer round trips; above it, the allocator is down for them.
func slowStore(roundTrip time.Duration, outage bool) *scenario {
	var during time.Duration
	name := fmt.Sprintf("slow store: +%d ms round trip to Redis for {lasting}", roundTrip.Milliseconds())
	if outage {
		name = fmt.Sprintf("slow store: +%d ms round trip to Redis (above the store timeout) for {lasting}", roundTrip.Milliseconds())
	}
	return &scenario{
		name: name,
		top:  topology{allocators: 1, slowStore: true}, at: 3 * time.Second, lasting: 5 * time.Second,
		begin: func(e *env) { e.storeProxy.SetRoundTrip(roundTrip) },
		end: func(e *env) {
			during = e.roundTrip()
			e.storeProxy.SetRoundTrip(0)
		},
		outage:   outage,
		onLeases: !outage,
		check: func(t *testing.T, e *env, m *measure) string {
			if !outage && during < roundTrip {
				t.Errorf("the nodes' Acquire round trip was %v at the fault's end: the store was not %v away", during, roundTrip)
			}
			if outage {
				return ""
			}
			return fmt.Sprintf("Acquire round trip %v", during.Round(time.Millisecond))
		},
	}
}

// stopOneOfTwo stops one of two allocators: the nodes must eject it and
// stay on leases with the other.
func stopOneOfTwo() *scenario {
	var ejections float64
	return &scenario{
		name: "allocator SIGSTOP for {lasting} (one of two)", short: true,
		top: topology{allocators: 2}, at: 3 * time.Second, lasting: 5 * time.Second,
		begin: func(e *env) { e.allocs[1].signal(syscall.SIGSTOP) },
		end: func(e *env) {
			ejections = e.ejections(e.allocs[1].addr) // before the nodes close and take their metrics along
			e.allocs[1].signal(syscall.SIGCONT)
		},
		onLeases: true,
		check: func(t *testing.T, e *env, m *measure) string {
			if ejections < nodes {
				t.Errorf("the stopped allocator was ejected %.0f times, want at least once per node (%d)", ejections, nodes)
			}
			return fmt.Sprintf("the stopped allocator ejected %.0f times", ejections)
		},
	}
}

// churn replaces a node every second while the fault lasts.
func churn() *scenario {
	stop, done := make(chan struct{}), make(chan struct{})
	replaced := 0
	return &scenario{
		name: "node churn: a node replaced every second for {lasting}", short: true,
		top: topology{allocators: 1}, at: 3 * time.Second, lasting: 6 * time.Second,
		begin: func(e *env) {
			go func() {
				defer close(done)
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for i := 0; ; i++ {
					if err := e.replace(i % nodes); err != nil {
						e.t.Errorf("replacing node %d: %v", i%nodes, err)
					}
					replaced++
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
		},
		end: func(e *env) { close(stop); <-done },
		check: func(t *testing.T, e *env, m *measure) string {
			return fmt.Sprintf("%d nodes replaced", replaced)
		},
	}
}

// lostReplies loses one Acquire reply in three while the fault lasts.
func lostReplies() *scenario {
	return &scenario{
		name: "lost Acquire replies: 1 in 3 for {lasting}", short: true,
		top: topology{allocators: 1, lossEvery: 3}, at: 3 * time.Second, lasting: 5 * time.Second,
		begin: func(e *env) { e.loss.on.Store(true) },
		end:   func(e *env) { e.loss.on.Store(false) },
		check: func(t *testing.T, e *env, m *measure) string {
			lost, resent := e.loss.lost.Load(), e.loss.resends()
			if lost == 0 || resent == 0 {
				t.Errorf("%d replies lost, %d requests sent again with their sequence number: the fault did not happen", lost, resent)
			}
			return fmt.Sprintf("%d replies lost, %d requests sent again with their seq", lost, resent)
		},
	}
}

// checkWindows: no window of the store admits more than its limit, the
// step back notwithstanding: what its leases gave and what nodes admitted
// in fallback at its start (which the store debits from it). Admissions
// made across a window's edge, which may belong to either window, are not
// counted against it.
func checkWindows(t *testing.T, e *env, m *measure) string {
	win, leased, fb, unsure := m.window.fullest()
	if leased+fb > m.open.Limit {
		t.Errorf("window %d admitted %d on leases and %d in fallback, limit %d (and %d on its edges): a window went over its limit",
			win, leased, fb, m.open.Limit, unsure)
	}
	return fmt.Sprintf("fullest window: %d on leases + %d in fallback, limit %d", leased, fb, m.open.Limit)
}

// checkCutNode: the node cut off lives on what it held, then on its
// fallback allowance (guarantee 4): its lease's tokens and its share of the
// rate until the lease ends (burst/N and rate/N·ttl when shares are even),
// then burst/N and rate/N a second.
func checkCutNode(t *testing.T, e *env, m *measure) string {
	r := m.open
	burst, rate, ttl := float64(r.Capacity()), r.Rate(), r.Lease.TTL.Seconds()
	cut := m.faultEnd.Sub(m.faultStart).Seconds()
	got := m.nodeBetween(0, m.faultStart, m.faultEnd)
	bound := 2*burst/nodes + rate/nodes*(ttl+cut)
	if float64(got) > bound {
		t.Errorf("the cut-off node admitted %d in %.1fs, above 2·burst/N + rate/N·(ttl + cut) = %.0f", got, cut, bound)
	}
	return fmt.Sprintf("cut node admitted %d in %.1f s (≤ %.0f: 2·burst/N + rate/N·(ttl + cut))", got, cut, bound)
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs: 40 s in short form, three minutes in full (make chaos)")
	}
	if raceEnabled {
		t.Skip("the race detector's slowdown would be what the suite measures: make test runs it without")
	}
	full := os.Getenv("CHAOS") == "full"
	scale := shortScale
	if full {
		scale = 1
	}
	var rows []row
	for _, sc := range scenarios() {
		if !full && !sc.short {
			continue
		}
		sc.name = strings.ReplaceAll(sc.name, "{lasting}", seconds(scaled(sc.lasting, scale)))
		t.Run(sc.name, func(t *testing.T) {
			rows = append(rows, runScenario(t, sc, scale))
		})
	}
	if out := os.Getenv("CHAOS_TABLE"); out != "" {
		if err := writeTable(out, rows, scale); err != nil {
			t.Fatal(err)
		}
	}
}

func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) * scale)
}

// runScenario runs one scenario, checks it and returns its row.
func runScenario(t *testing.T, sc *scenario, scale float64) row {
	before := goleak.IgnoreCurrent()
	e := newEnv(t, sc.top)
	open, _ := e.rules.Get(openRule)
	m := newMeasure(open, scaled(runLength, scale), nodes)
	if sc.top.window {
		m.window = newWindowCount(open.Period, e.storeClock.Now)
	}
	at, lasting := scaled(sc.at, scale), scaled(sc.lasting, scale)
	e.drive(m, func() {
		sleepUntil(m.start.Add(at))
		m.faultStart = time.Now()
		sc.begin(e)
		if lasting > 0 {
			sleepUntil(m.start.Add(at + lasting))
		}
		if sc.end != nil {
			sc.end(e)
		}
		m.faultEnd = time.Now()
	})
	e.close()
	r := row{name: sc.name}
	r.leaked, r.leakedList = leaks(before)
	if sc.excess != nil {
		r.extra, r.why = sc.excess(e, m)
	}
	r.b = m.bounds(r.extra)
	r.back = m.backOnLeases()
	if sc.top.window { // its leases die with their window: nodes fall back at every window's start
		r.back = notApplicable
	}
	r.fallback = m.fallbacks()
	r.closedAdmitted, r.closedDenied = m.closedAllowed[client.ModeFallback].Load(), m.closedDenied[client.ModeFallback].Load()
	r.errors = m.errors.Load()
	if sc.check != nil {
		r.notes = sc.check(t, e, m)
	}
	r.check(t, sc, m)
	r.failed = t.Failed()
	if os.Getenv("CHAOS_LOG") != "" {
		t.Log(m.timeline())
		if m.window != nil {
			t.Log(m.window)
		}
	}
	t.Log(r.line())
	return r
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// leaks counts and lists the goroutines started since before that are
// still there a few seconds after everything was closed.
func leaks(before goleak.Option) (int, string) {
	var err error
	for range 5 {
		if err = goleak.Find(before); err == nil {
			return 0, ""
		}
		time.Sleep(500 * time.Millisecond)
	}
	return strings.Count(err.Error(), "Goroutine "), err.Error()
}
