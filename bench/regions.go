package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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
