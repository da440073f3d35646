package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The keys scenario measures what the long tail costs: many keys at modest
// rates, Zipf-distributed (s=1.1) over 10,000 to 1,000,000 keys, on 8
// nodes. At each size it runs four phases:
//
//  1. load: Allot's adaptive leases, per-request Redis and local-only
//     limiting on the same load (the rows "N keys" of the main table), with
//     the nodes' heap taken before the load, when it stops (keys live) and
//     two lease TTLs later (keys idle);
//  2. touch once: 8 fresh nodes touch fresh keys once each, at a steady
//     pace, and the keys live their whole life (lease, sweeps, return,
//     eviction): the nodes' CPU and the allocator's, per key;
//  3. hold: a fresh node holds N keys at once under a rule whose lease
//     outlives the phase, so that nothing is due: its CPU over a window
//     with no traffic (the sweep's cost), its heap per key, and Redis's
//     used_memory per key;
//  4. the report's table, verdicts and plot (keys_report.go).
//
// Each phase has nodes of its own, closed at its end, so that what one
// leaves behind (keys still retrying, say) is not counted in the next.

// keysResult is what the scenario measured at one size.
type keysResult struct {
	keys int
	// Load phase: copies of the adaptive and per-request Redis rows of the
	// main table.
	adaptive, redis *row
	held            int     // keys the nodes held when the load stopped, over all nodes
	heapLive        float64 // node heap per key held then, bytes
	heapIdle        float64 // the same, two lease TTLs later
	heldIdle        int     // keys still held then
	// Touch-once phase: a trickle of new keys (each Acquire call carries a
	// key or two) and a flood (calls are full).
	trickle, flood touchResult
	// Hold phase.
	hold        int     // keys the holding node held during the window
	windowCmds  int64   // Redis commands sent during the window: ~0 if nothing was due
	sweepPct    float64 // its CPU with nothing due, % of one core
	heapHeld    float64 // its heap per key held, bytes
	redisPerKey float64 // Redis used_memory per key stored, bytes
	redisKeys   int64   // keys of the hold rule stored in Redis: those that had a lease
	samples     []string
}

// touchResult is what one touch-once run measured.
type touchResult struct {
	rate     float64       // keys touched per second, over all nodes
	touched  int           // key touches: keys per node × nodes
	wall     time.Duration // from the first touch until the last key left
	left     int           // keys still held when the run gave up waiting
	nodeUS   float64       // node CPU per key touched once, µs
	allocUS  float64       // allocator CPU per key touched once, µs
	cmds     float64       // Redis commands sent per key touched once
	acquires float64       // the nodes' Acquire calls per key touched once
	releases float64       // and their Release calls
}

// keysRule names the rule of one size and phase: no name is a prefix of
// another, so a Redis pattern finds one rule's keys.
func keysRule(size int, phase string) string { return fmt.Sprintf("keys-%d-%s", size, phase) }

// holdTTL is the lease TTL of the hold phase's rule: longer than the phase,
// so that no lease ends and no key goes idle while it is measured.
const holdTTL = 10 * time.Minute

func (s *session) keysScenario(rep *report) error {
	for _, size := range s.cfg.keysSizes {
		res, err := s.keysAt(size, rep)
		if err != nil {
			return fmt.Errorf("%d keys: %w", size, err)
		}
		rep.keys = append(rep.keys, res)
	}
	return nil
}

func (s *session) keysAt(size int, rep *report) (*keysResult, error) {
	out := &keysResult{keys: size}
	if err := s.keysLoad(out, rep); err != nil {
		return nil, err
	}
	c := s.cfg
	var err error
	if out.trickle, err = s.touchOnce(out.keys, "once", c.keysTouch, c.keysTouchRate); err != nil {
		return nil, err
	}
	if out.flood, err = s.touchOnce(out.keys, "flood", c.keysFlood, c.keysFloodRate); err != nil {
		return nil, err
	}
	if err := s.holdKeys(out); err != nil {
		return nil, err
	}
	return out, nil
}

// keysLoad runs the Zipf load with every strategy and takes the nodes'
// heap: before, when the load stops, and two lease TTLs later.
func (s *session) keysLoad(out *keysResult, rep *report) error {
	c := s.cfg
	r := s.rule(keysRule(out.keys, "load"))
	l := s.baseLoad(uniformRates(c.nodes, c.demand*float64(c.limit)), out.keys)
	l.duration = c.keysRun
	scenario := fmt.Sprintf("%d keys", out.keys)

	h, err := newHybrid(r.Name, c.nodes, []string{s.allocAddr})
	if err != nil {
		return err
	}
	l.counts = newCounts(out.keys, 2+2*len(l.rates)*l.workers)
	// The nodes' fixed costs first (their connections' header tables and
	// buffers, the rule's metrics): a few keys of their own, touched and
	// gone, so that the heap taken before the load counts keys only.
	for node, cl := range h.clients {
		for i := range 50 {
			cl.Allow(context.Background(), r.Name, fmt.Sprintf("warm-%d-%d", node, i))
		}
	}
	if !waitFor(3*r.Lease.TTL+5*time.Second, func() bool { return h.keys() == 0 }) {
		progress("  warm-up: %d keys still held", h.keys())
	}
	s.commandStats()
	before := heapAfterGC()
	if err := writeHeapProfile(c.heapProfile, "before", out.keys); err != nil {
		return err
	}
	// The heap with the keys live is taken a quarter of a second before the
	// load stops: a key leaves about a second after its last request, and
	// the long tail's keys had mostly left by the time the run's counts were
	// added up (9 keys held at 1,000,000 keys).
	var live uint64
	var liveErr error
	la := l
	la.events = append(slices.Clip(l.events), event{at: l.duration - 250*time.Millisecond, what: "the nodes' heap and keys", do: func() {
		live, out.held = heapAfterGC(), h.keys()
		liveErr = writeHeapProfile(c.heapProfile, "live", out.keys)
	}})
	w := s.measure(scenario, "allot adaptive", -1, h, la, r)
	w.res.perKeyOff, w.res.perKeyAdm = nil, nil // (the arrays stay in l.counts, as they were in before)
	if liveErr != nil {
		return liveErr
	}
	if out.held > 0 {
		out.heapLive = (float64(live) - float64(before)) / float64(out.held)
	}
	out.samples = append(out.samples, s.memoryUsage("*"+r.Name+"*", "allot key under the Zipf load")...)
	rep.rows = append(rep.rows, w)
	out.adaptive = &w
	time.Sleep(2 * r.Lease.TTL)
	idle := heapAfterGC()
	if err := writeHeapProfile(c.heapProfile, "idle", out.keys); err != nil {
		return err
	}
	out.heldIdle = h.keys()
	if out.held > 0 {
		out.heapIdle = (float64(idle) - float64(before)) / float64(out.held)
	}
	progress("  nodes' heap: %.0f B per live key (%d keys held), %.0f B per idle key after 2 × TTL (%d still held)",
		out.heapLive, out.held, out.heapIdle, out.heldIdle)
	h.close()

	prefix := fmt.Sprintf("classic:keys%d:", out.keys)
	for _, cand := range []struct {
		name string
		make func() (strategy, error)
	}{
		{"Redis Lua per request", func() (strategy, error) { return newPerRequestRedis(r, c.nodes, s.redisURL, prefix) }},
		{"local only (limit/N)", func() (strategy, error) { return newLocalOnly(r, c.nodes), nil }},
	} {
		st, err := cand.make()
		if err != nil {
			return fmt.Errorf("%s: %w", cand.name, err)
		}
		w := s.measure(scenario, cand.name, -1, st, l, r)
		w.res.perKeyOff, w.res.perKeyAdm = nil, nil
		rep.rows = append(rep.rows, w)
		if cand.name == "Redis Lua per request" {
			out.redis = &w
			out.samples = append(out.samples, s.memoryUsage(prefix+"*", "per-request Redis key")...)
		}
		st.close()
	}
	return nil
}

// touchOnce has every node touch fresh keys once each (min(size,
// perNode) of them), rate keys per second over the fleet, and waits until
// every key has left the nodes: the CPU of the nodes (this process, less
// its idle CPU over the same time) and of the allocator, per key touched.
func (s *session) touchOnce(size int, phase string, perNode int, rate float64) (touchResult, error) {
	c := s.cfg
	out := touchResult{rate: rate}
	rule := keysRule(size, phase)
	h, err := newHybridVia(rule, c.nodes, func(int) []string { return []string{s.allocAddr} }, hybridOptions{id: phase})
	if err != nil {
		return out, err
	}
	defer h.close()
	perNode = min(size, perNode)
	names := make([]string, perNode)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	idle, allocIdle := s.idleCPU(time.Second)
	progress("  touch once (%s): %d keys on each of %d nodes at %.0f keys/s each", phase, perNode, c.nodes, rate/float64(c.nodes))
	s.resetStats()
	stop, err := startProfile(c.touchProfile, phase, size)
	if err != nil {
		return out, err
	}
	cpu0, alloc0, start := selfCPU(), s.allocCPU(), time.Now()
	var wg sync.WaitGroup
	for node := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pace(rate/float64(c.nodes), len(names), func(i int) { h.clients[node].Allow(context.Background(), rule, names[i]) })
		}()
	}
	wg.Wait()
	// A key leaves half a TTL after its last request, with a sweep to
	// spare; the wait allows for far more, and gives up saying how many
	// keys stayed.
	ttl := s.rule(rule).Lease.TTL
	if !waitFor(3*ttl+5*time.Second, func() bool { return h.keys() == 0 }) {
		out.left = h.keys()
		progress("  touch once (%s): %d keys still held %v after the last touch", phase, out.left, 3*ttl+5*time.Second)
	}
	time.Sleep(200 * time.Millisecond) // the last returns, sent by goroutines of their own
	out.wall = time.Since(start)
	stop()
	node := selfCPU() - cpu0 - time.Duration(float64(idle)*out.wall.Seconds())
	alloc := s.allocCPU() - alloc0 - time.Duration(float64(allocIdle)*out.wall.Seconds())
	out.touched = perNode * c.nodes
	out.nodeUS = float64(node.Microseconds()) / float64(out.touched)
	out.allocUS = float64(alloc.Microseconds()) / float64(out.touched)
	sent, _ := s.commandStats()
	out.cmds = float64(sent) / float64(out.touched)
	out.acquires = float64(h.calls("Acquire")) / float64(out.touched)
	out.releases = float64(h.calls("Release")) / float64(out.touched)
	progress("  touch once (%s): %d touches in %v: node %.1f µs per key, allocator %.1f µs per key, %.2f Redis commands sent, %.3f Acquire and %.3f Release calls per key",
		phase, out.touched, out.wall.Round(10*time.Millisecond), out.nodeUS, out.allocUS, out.cmds, out.acquires, out.releases)
	return out, nil
}

// holdKeys has one more node hold N keys at once, then measures its CPU
// over a window with no traffic and nothing due, its heap per key, and
// Redis's memory per key.
func (s *session) holdKeys(out *keysResult) error {
	c := s.cfg
	rule := keysRule(out.keys, "hold")
	names := make([]string, out.keys)
	for i := range names {
		names[i] = "h" + strconv.Itoa(i)
	}
	h, err := newHybridVia(rule, 1, func(int) []string { return []string{s.allocAddr} }, hybridOptions{id: "holder"})
	if err != nil {
		return err
	}
	defer h.close()
	// The earlier phases' keys are measured already: dropped now, they
	// cannot expire in the window below and free more than the held keys
	// take (a short run measured -14 B a key).
	s.dropKeys("*"+keysRule(out.keys, "load")+"*", "*"+keysRule(out.keys, "once")+"*", "*"+keysRule(out.keys, "flood")+"*",
		fmt.Sprintf("classic:keys%d:*", out.keys))
	s.settleRedis()
	window := c.keysWindow
	debug.FreeOSMemory() // (as before the window below)
	idle, _ := s.idleCPU(window)
	before, mem0 := heapAfterGC(), s.usedMemory()
	if err := writeHeapProfile(c.heapProfile, "unheld", out.keys); err != nil {
		return err
	}
	progress("  hold: %d keys on one node at %.0f keys/s", out.keys, c.keysHoldRate)
	s.resetStats()
	pace(c.keysHoldRate, len(names), func(i int) { h.clients[0].Allow(context.Background(), rule, names[i]) })
	// Wait for the first leases: until the node sends Redis fewer than one
	// command per second per 10,000 keys (at least 2), for at most a
	// minute. (A script call carries many keys: the commands sent are no
	// count of the keys served.)
	s.waitRedisCalm(1, max(float64(out.keys)/1e4, 2), time.Minute)
	held := h.keys()
	mem1, stored := s.usedMemory(), s.countKeys("*"+rule+"*")
	heap := heapAfterGC()
	if err := writeHeapProfile(c.heapProfile, "hold", out.keys); err != nil {
		return err
	}
	sent0, _ := s.commandStats()
	// Memory the earlier phases freed (half a gigabyte of per-key counts at
	// a million keys) goes back to the system now, not in the window: Go's
	// background scavenger returns it at up to 1% of a CPU.
	debug.FreeOSMemory()
	cpu0 := selfCPU()
	time.Sleep(window)
	cpu := selfCPU() - cpu0 - time.Duration(float64(idle)*window.Seconds())
	sent1, _ := s.commandStats()
	out.windowCmds = sent1 - sent0 - 1 // less the INFO that read them
	out.hold = held
	out.sweepPct = 100 * cpu.Seconds() / window.Seconds()
	if held > 0 {
		out.heapHeld = (float64(heap) - float64(before)) / float64(held)
	}
	out.redisKeys = stored
	if out.redisKeys > 0 {
		out.redisPerKey = float64(mem1-mem0) / float64(out.redisKeys)
	}
	out.samples = append(out.samples, s.memoryUsage("*"+rule+"*", "allot key, one holder")...)
	progress("  hold: %d keys held (%d at the end, %d in Redis): %.2f%% of a core over %v with %d Redis commands, heap %.0f B per key; Redis %.0f B per key",
		held, h.keys(), out.redisKeys, out.sweepPct, window, out.windowCmds, out.heapHeld, out.redisPerKey)
	return nil
}
