package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/rules"
)

// The regions scenario holds one global limit over three regions of four
// nodes each, three ways, under the same load:
//
//   - tree: a parent allocator and an allocator per region with Parent
//     (the rule of scope global), each with its own store, each region
//     --regions-rtt from the parent;
//   - one shared Redis: an allocator per region, all on one Redis that is
//     --regions-rtt from each of them (the rule regional: they share it);
//   - independent regional limits: an allocator per region with its own
//     store and a third of the rule, no parent.
//
// Every node is regionsNodeRTT from its region's allocator. The
// allocators run in the bench's process (their metrics are read from
// their registries), on the embedded memory store but for the shared
// Redis.

const (
	regionsCount   = 3
	regionNodes    = 4 // per region
	regionsLimit   = 1000
	regionsBurst   = 100
	regionsNodeRTT = time.Millisecond
)

var regionsApproaches = []struct{ name, label string }{
	{"tree", "tree: parent and regions"},
	{"shared", "one shared Redis"},
	{"independent", "independent limits (limit/3)"},
}

var regionsLoadLabels = map[string]string{"moving": "moving", "even": "even"}

// regionsRow is one approach under one load.
type regionsRow struct {
	load, approach, label string
	res                   *result
	ideal                 float64
	worst                 float64 // most admitted in 1 s over burst + 1.1·rate
	// steady is what was admitted after the warm-up over the rate for as
	// long: a perfect limiter's bucket is empty by then (the load is
	// twice the rate), so it admits the rate, and the cold start is out.
	steady float64
	// Per 1,000 admitted after the warm-up: store calls (the allocators'
	// allot_allocator_store_seconds samples; a tree's the parent's), what
	// crossed the far link (a tree's calls to the parent; the shared
	// Redis's commands), and the nodes' calls to their allocators.
	store, far, node float64
	farCounted       bool // false: the shared Redis's commands were not counted
}

func (r *report) findRegions(load, approach string) *regionsRow {
	for i := range r.regions {
		if w := &r.regions[i]; w.load == load && w.approach == approach {
			return w
		}
	}
	return nil
}

// regionsRuleYAML is the scenario's rule for one approach and load; the
// independent regions' is a third of the limit (over a period three times
// as long) and of the burst.
func regionsRuleYAML(name, approach string) string {
	limit, period, burst, scope := regionsLimit, "1s", regionsBurst, ""
	switch approach {
	case "tree":
		scope = "    scope: global\n"
	case "independent":
		period, burst = "3s", regionsBurst/regionsCount
	}
	return fmt.Sprintf("rules:\n  - name: %s\n    algorithm: token_bucket\n    limit: %d\n    period: %s\n    burst: %d\n    lease: { ttl: 2s }\n%s",
		name, limit, period, burst, scope)
}

// regionsFleet is one approach's allocators, links and nodes.
type regionsFleet struct {
	approach string
	parent   *allocator.Allocator   // the tree's
	allocs   []*allocator.Allocator // one per region: its nodes'
	proxies  []*netdelay.Proxy
	redis    *proc         // the shared Redis, when the bench started it
	rdb      *redis.Client // the shared Redis, to count its commands
	nodes    *hybrid
}

var regionsLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// serveInProcess starts an allocator in this process.
func serveInProcess(cfg allocator.Config) (*allocator.Allocator, error) {
	cfg.Listen, cfg.Logger = "127.0.0.1:0", regionsLog
	// Above the far link's round trip: the shared Redis's calls cross it,
	// and a region's first lease of a key waits for the parent's answer.
	cfg.StoreTimeout = time.Second
	a, err := allocator.New(cfg)
	if err != nil {
		return nil, err
	}
	go func() { _ = a.Serve() }()
	return a, nil
}

func (s *session) startRegionsFleet(approach, rule string) (*regionsFleet, error) {
	c := s.cfg
	set, err := rules.Parse(rule, []byte(regionsRuleYAML(rule, approach)))
	if err != nil {
		return nil, err
	}
	f := &regionsFleet{approach: approach}
	fail := func(err error) (*regionsFleet, error) { f.close(); return nil, err }
	switch approach {
	case "tree":
		if f.parent, err = serveInProcess(allocator.Config{Rules: set}); err != nil {
			return fail(err)
		}
		for i := range regionsCount {
			up, err := netdelay.Start(f.parent.Addr(), c.regionsRTT)
			if err != nil {
				return fail(err)
			}
			f.proxies = append(f.proxies, up)
			a, err := serveInProcess(allocator.Config{Rules: set, Parent: up.Addr(), Region: fmt.Sprintf("region-%d", i), Regions: regionsCount})
			if err != nil {
				return fail(err)
			}
			f.allocs = append(f.allocs, a)
		}
	case "shared":
		// A Redis of its own, so that its command counts are these
		// allocators' alone; the session's when none can be started.
		storeURL := s.redisURL
		if p, u, err := startRedis(s.dir); err == nil {
			f.redis, storeURL = p, u
			opts, _ := redis.ParseURL(u)
			f.rdb = redis.NewClient(opts)
		} else {
			progress("  no Redis of its own for the shared store (%v): the session's, its commands not counted", err)
		}
		u, err := url.Parse(storeURL)
		if err != nil || u.Host == "" {
			return fail(fmt.Errorf("cannot read host:port from Redis URL %q", storeURL))
		}
		// Started side by side: each loads its scripts across the link,
		// a round trip apiece.
		var vias []string
		for range regionsCount {
			far, err := netdelay.Start(u.Host, c.regionsRTT)
			if err != nil {
				return fail(err)
			}
			f.proxies = append(f.proxies, far)
			via := *u
			via.Host = far.Addr()
			vias = append(vias, via.String())
		}
		allocs, errs := make([]*allocator.Allocator, regionsCount), make([]error, regionsCount)
		var wg sync.WaitGroup
		for i, via := range vias {
			wg.Go(func() { allocs[i], errs[i] = serveInProcess(allocator.Config{Rules: set, RedisURL: via}) })
		}
		wg.Wait()
		for i, a := range allocs {
			if a != nil {
				f.allocs = append(f.allocs, a)
			} else if err == nil {
				err = errs[i]
			}
		}
		if err != nil {
			return fail(err)
		}
	case "independent":
		for range regionsCount {
			a, err := serveInProcess(allocator.Config{Rules: set})
			if err != nil {
				return fail(err)
			}
			f.allocs = append(f.allocs, a)
		}
	}
	var near []string // node i's proxy to its region's allocator
	for i := range regionsCount * regionNodes {
		p, err := netdelay.Start(f.allocs[i/regionNodes].Addr(), regionsNodeRTT)
		if err != nil {
			return fail(err)
		}
		f.proxies = append(f.proxies, p)
		near = append(near, p.Addr())
	}
	o := hybridOptions{roundTrip: regionsNodeRTT, id: approach + "-node", fleet: regionsCount * regionNodes}
	switch approach {
	case "shared":
		// Every lease call waits on a store call across the far link:
		// the nodes' timeouts are for an allocator that far.
		o.roundTrip = regionsNodeRTT + c.regionsRTT
	case "independent":
		o.fleet = regionNodes // each region's limit is its own nodes'
	}
	if f.nodes, err = newHybridVia(rule, regionsCount*regionNodes, func(i int) []string { return []string{near[i]} }, o); err != nil {
		return fail(err)
	}
	return f, nil
}

// close stops the nodes, then the regions' allocators, then the parent.
func (f *regionsFleet) close() {
	if f.nodes != nil {
		f.nodes.close()
	}
	stop := func(a *allocator.Allocator) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}
	var wg sync.WaitGroup
	for _, a := range f.allocs {
		wg.Go(func() { stop(a) })
	}
	wg.Wait()
	if f.parent != nil {
		stop(f.parent)
	}
	closeProxies(f.proxies)
	if f.rdb != nil {
		f.rdb.Close()
	}
	f.redis.kill()
}

// regionsCounts are the counters a row is made of, at one instant.
type regionsCounts struct{ store, far, node float64 }

func (f *regionsFleet) counts() regionsCounts {
	var n regionsCounts
	switch f.approach {
	case "tree":
		// The regions' own stores serve no call of a global rule, and
		// what their allocators count as store calls is their nodes'
		// calls, lent out of the regions' leases: the store calls are
		// the parent's, and the far link carries every call it served.
		n.store = metricSum(f.parent.Registry(), "allot_allocator_store_seconds")
		n.far = metricSum(f.parent.Registry(), "allot_allocator_requests_total")
	default:
		for _, a := range f.allocs {
			n.store += metricSum(a.Registry(), "allot_allocator_store_seconds")
		}
		if f.approach == "shared" {
			n.far = n.store
			if f.rdb != nil {
				// Every command the allocators sent across the link: the
				// leases' scripts and the background polls (overrides, key
				// count, health), not those the scripts run inside Redis.
				n.far = 0
				for name, calls := range commandCalls(f.rdb) {
					if !scriptInner[name] {
						n.far += float64(calls)
					}
				}
			}
		}
	}
	n.node = float64(f.nodes.calls("Acquire") + f.nodes.calls("Release"))
	return n
}

// metricSum sums a family's counters, or its histograms' sample counts.
func metricSum(reg *prometheus.Registry, name string) float64 {
	fams, err := reg.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				n += float64(h.GetSampleCount())
			} else if c := m.GetCounter(); c != nil {
				n += c.GetValue()
			}
		}
	}
	return n
}

// regionsRate is node's offered rate at elapsed: twice the rule's rate in
// all, spread evenly, or 80% of it on one region at a time, the next
// every period, the rest split evenly over the others' nodes.
func regionsRate(moving bool, period time.Duration) func(node int, elapsed time.Duration) float64 {
	total := 2.0 * regionsLimit
	hot := 0.8 * total / regionNodes
	cold := 0.2 * total / float64((regionsCount-1)*regionNodes)
	even := total / (regionsCount * regionNodes)
	return func(node int, elapsed time.Duration) float64 {
		switch {
		case !moving:
			return even
		case node/regionNodes == int(elapsed/period)%regionsCount:
			return hot
		default:
			return cold
		}
	}
}

func (s *session) regions(rep *report) error {
	c := s.cfg
	global, err := rules.Parse("regions", []byte(regionsRuleYAML("regions", "tree")))
	if err != nil {
		return err
	}
	one := global.Rules()[0] // one perfect limiter of the rule
	nonce := time.Now().UnixMilli() % 1_000_000
	for _, ld := range c.regionsLoads {
		for _, ap := range regionsApproaches {
			rule := fmt.Sprintf("regions-%s-%s-%d", ap.name, ld, nonce) // a fresh key in any Redis
			f, err := s.startRegionsFleet(ap.name, rule)
			if err != nil {
				return fmt.Errorf("%s: %w", ap.label, err)
			}
			rate := regionsRate(ld == "moving", c.regionsPeriod)
			l := load{rates: uniformRates(regionsCount*regionNodes, 2*regionsLimit), rateAt: rate,
				workers: c.workers, keys: 1, duration: c.regionsRun}
			warm := l.duration / 5
			var before regionsCounts
			l.events = []event{{at: warm, what: "warm-up over: counts taken", do: func() { before = f.counts() }}}
			progress("  %-30s %s load at %.0f/s offered for %v", ap.label, ld, sum(l.rates), l.duration)
			res := drive(f.nodes, l)
			after := f.counts()
			f.close()
			w := regionsRow{load: ld, approach: ap.name, label: ap.label, res: res, ideal: ideal(res, one),
				worst:      worstWindow(res.bins, float64(one.Burst)+1.1*one.Rate()),
				farCounted: ap.name != "shared" || f.rdb != nil}
			if steady := admittedAfter(res, warm); steady > 0 {
				w.steady = float64(steady) / (one.Rate() * (res.elapsed - warm).Seconds())
				per := 1000 / float64(steady)
				w.store, w.far, w.node = per*(after.store-before.store), per*(after.far-before.far), per*(after.node-before.node)
			}
			progress("  %-30s admitted/ideal %.3f (after the warm-up %.3f), worst 1s %.2f of b+1.1r, per 1k admitted: %.1f store calls, %.1f over the far link, %.1f node calls",
				ap.label, float64(res.admitted)/w.ideal, w.steady, w.worst, w.store, w.far, w.node)
			rep.regions = append(rep.regions, w)
		}
	}
	return nil
}

// ratio is a over b, "—" without b.
func ratio(a, b float64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// regionsText is the report's regions section: a row per load and
// approach, with ratios to the baselines of the same load.
func (r *report) regionsText() string {
	c := r.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Regions\n\n"+
		"One global limit, a token bucket of %d/s with a burst of %d and a 2 s lease TTL, over %d regions of %d nodes, "+
		"each node %v from its region's allocator; offered twice the rate (%d/s) for %v: **moving**, 80%% of it on one region at a time, "+
		"the next every %v, the rest split evenly over the others; **even**, spread evenly. Three ways of holding it: "+
		"**tree**, a parent allocator and an allocator per region leasing the rule (`scope: global`) from it, %v away, each with its own store; "+
		"**one shared Redis**, an allocator per region, all on one Redis %v away from each (the rule regional); "+
		"**independent limits**, an allocator per region with its own store and a third of the limit and of the burst (%d per 3 s, burst %d), no parent. "+
		"The allocators run in the bench's process, on the embedded memory store but for the shared Redis.\n\n",
		regionsLimit, regionsBurst, regionsCount, regionNodes, regionsNodeRTT, 2*regionsLimit, c.regionsRun, c.regionsPeriod, c.regionsRTT, c.regionsRTT,
		regionsLimit, regionsBurst/regionsCount)
	b.WriteString("| load | approach | admitted / ideal | ÷ shared Redis | ÷ independent | after the warm-up: admitted / rate | worst 1 s / (burst + 1.1·rate) | store calls per 1k admitted | over the far link per 1k admitted | ÷ shared Redis | node calls per 1k admitted |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	notCounted := false
	for _, w := range r.regions {
		acc := float64(w.res.admitted) / w.ideal
		accShared, accIndep, farShared := 0.0, 0.0, 0.0
		if x := r.findRegions(w.load, "shared"); x != nil {
			accShared, farShared = float64(x.res.admitted)/x.ideal, x.far
		}
		if x := r.findRegions(w.load, "independent"); x != nil {
			accIndep = float64(x.res.admitted) / x.ideal
		}
		worst := "—"
		if w.worst > 0 {
			worst = fmt.Sprintf("%.2f", w.worst)
		}
		far, farRatio := fmt.Sprintf("%.1f", w.far), ratio(w.far, farShared)
		if w.approach == "independent" {
			far, farRatio = "0 (none)", "—"
		}
		if !w.farCounted {
			far += "*"
			notCounted = true
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f | %s | %s | %.3f | %s | %.1f | %s | %s | %.1f |\n",
			w.load, w.label, acc, ratio(acc, accShared), ratio(acc, accIndep), w.steady, worst, w.store, far, farRatio, w.node)
	}
	b.WriteString("\nadmitted / ideal: over what one perfect limiter of the global rule would admit (burst + rate × the run, or what was offered if less); " +
		"the ÷ columns divide by the same load's baseline. After the warm-up: what was admitted from the end of a warm-up of a fifth of the run, over the rate for as long, " +
		"what a perfect limiter admits once its burst is spent: the run without its cold start (every run starts with no lease anywhere; a burst spent after the warm-up puts it up to burst / (rate × the rest of the run) over 1). " +
		"Worst 1 s: the most admitted in any one-second window. " +
		"Per 1k admitted: counts from the end of the warm-up, over what was admitted since. " +
		"Store calls: the allocators' calls to their stores (the samples of `allot_allocator_store_seconds`); a tree's are its parent's, since a region's own store serves no call of a global rule. " +
		"Over the far link: for the tree, the calls the parent served (the regions' Acquire and Release); for the shared Redis, the commands Redis served from the three allocators " +
		"(their scripts and connections' handshakes, and their background reads of the overrides and of the key count, each every 100 ms or so, paced by the round trip), not those the scripts run inside it; " +
		"each is a round trip of " + c.regionsRTT.String() + " unless pipelined with others. " +
		"Node calls: the nodes' Acquire and Release calls to their allocators, " + regionsNodeRTT.String() + " away.\n")
	if notCounted {
		b.WriteString("\n\\* no Redis of its own could be started for the shared store: the figure is its store calls, the background polls not counted.\n")
	}
	return b.String()
}

// regionsVerdicts states the tree's accuracy against the target the
// fleet's tests hold it to, with the baselines beside it.
func (r *report) regionsVerdicts(check func(ok bool, text string, args ...any)) {
	for _, ld := range r.cfg.regionsLoads {
		t := r.findRegions(ld, "tree")
		if t == nil {
			continue
		}
		acc := float64(t.res.admitted) / t.ideal
		text, args := "a tree of %d regions %v from the parent, load %s: admits %.3f of the ideal (%.3f after the warm-up)", []any{regionsCount, r.cfg.regionsRTT, ld, acc, t.steady}
		for _, base := range []string{"shared", "independent"} {
			if x := r.findRegions(ld, base); x != nil {
				text += "; " + x.label + " %.3f"
				args = append(args, float64(x.res.admitted)/x.ideal)
			}
		}
		text += "; target ≥ 0.97"
		if ld == "moving" {
			text += " (known short: docs/bounds.md, Accuracy, short of target)"
		}
		check(acc >= 0.97, text, args...)
	}
	// The bound every approach keeps in any second.
	var worst []string
	most := 0.0
	for _, w := range r.regions {
		if w.worst > 0 {
			worst = append(worst, fmt.Sprintf("%s, %s: %.2f", w.label, w.load, w.worst))
			most = max(most, w.worst)
		}
	}
	if len(worst) > 0 {
		check(most <= 1, "over %d regions, the most admitted in any second over burst + 1.1 × rate: %s; bound ≤ 1", regionsCount, strings.Join(worst, ", "))
	}
}

// plotRegions draws admitted/ideal per approach, a bar per load.
func (r *report) plotRegions(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("One global limit over %d regions, %v from the parent or the shared Redis", regionsCount, r.cfg.regionsRTT)
	p.Y.Label.Text = "admitted / ideal (1: one perfect limiter)"
	p.Y.Min, p.Y.Max = 0, 1.25
	var names []string
	for _, ap := range regionsApproaches {
		names = append(names, ap.label)
	}
	loads := r.cfg.regionsLoads
	width := vg.Points(40)
	for i, ld := range loads {
		var vals plotter.Values
		for _, ap := range regionsApproaches {
			v := 0.0
			if w := r.findRegions(ld, ap.name); w != nil {
				v = float64(w.res.admitted) / w.ideal
			}
			vals = append(vals, v)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color, bars.LineStyle.Width = palette[i%len(palette)], 0
		bars.Offset = width * vg.Length(2*i-len(loads)+1) / 2
		p.Add(bars)
		// Each bar's figure above it.
		var at plotter.XYs
		var figs []string
		for j, v := range vals {
			at = append(at, plotter.XY{X: float64(j), Y: v})
			figs = append(figs, fmt.Sprintf("%.3f", v))
		}
		if lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: figs}); err == nil {
			for k := range lbl.TextStyle {
				lbl.TextStyle[k].XAlign, lbl.TextStyle[k].Font.Size = draw.XCenter, vg.Points(9)
			}
			lbl.Offset = vg.Point{X: bars.Offset, Y: vg.Points(3)}
			p.Add(lbl)
		}
		p.Legend.Add(regionsLoadLabels[ld]+" load", bars)
	}
	p.NominalX(names...)
	p.Legend.Top = true
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
