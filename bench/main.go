// Command bench simulates a fleet of nodes limiting one global rate and
// compares Allot's leases (adaptive and fixed sizes) with per-request
// central limiting (a Redis Lua call, or a Check RPC, per decision) and
// with local-only limiting (limit/N per node), in one run on one Redis; and,
// in the uniform scenario, with Gubernator (three daemons, GLOBAL and
// default behaviour). The keys scenario (keys.go) measures what many keys
// cost; the regions scenario (regions.go) holds one limit over three
// regions three ways: a tree of allocators, one shared Redis far from
// every region, a third of it in each. It prints progress and writes a
// Markdown report and PNG plots.
//
//	go run ./bench                     # the full run (about 15 minutes on 2 cores, 9 of them keys, 1.5 regions;
//	                                   # the first also builds Gubernator's daemons, minutes more)
//	go run ./bench --scenarios keys    # the keys scenario alone
//	go run ./bench --short             # a few seconds: the smoke test make test runs
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	nodes      int
	limit      int64
	burst      int64
	demand     float64
	skew       float64
	leaseSizes []int64
	keyLimit   int64
	duration   time.Duration
	saturate   time.Duration
	workers    int
	redisURL   string
	out        string
	scenarios  map[string]bool
	killAt     float64
	restoreAt  float64
	// The distance scenario: round trips between nodes and the allocator
	// (and Redis, for per-request Redis), and its rule.
	distanceRTTs  []time.Duration
	distanceLimit int64
	distanceBurst int64
	distanceRun   time.Duration
	// The regions scenario: the round trip between each region and what
	// it shares (the parent, or the shared Redis), the loads, the length
	// of each run and how often the moving load moves.
	regionsRTT    time.Duration
	regionsLoads  []string
	regionsRun    time.Duration
	regionsPeriod time.Duration
	// The keys scenario: its sizes, the length of each load, the keys
	// each node touches once (at most), how fast keys are touched, the
	// window of the hold phase and the rules' lease TTL.
	keysSizes     []int
	keysRun       time.Duration
	keysTouch     int
	keysTouchRate float64
	keysFlood     int
	keysFloodRate float64
	keysHoldRate  float64
	keysWindow    time.Duration
	keysTTL       time.Duration
	touchProfile  string
	heapProfile   string
	// Gubernator in the uniform scenario (bench/gubernator, a module of
	// its own), and the algorithm its limit uses.
	gubernator    bool
	gubernatorAlg gubernatorAlgorithm
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&c.nodes, "nodes", 8, "simulated nodes")
	fs.Int64Var(&c.limit, "limit", 20000, "the rule's limit, tokens per second")
	fs.Int64Var(&c.burst, "burst", 0, "the rule's burst (default: one second of limit)")
	fs.Float64Var(&c.demand, "demand", 2, "offered load as a multiple of the limit")
	fs.Float64Var(&c.skew, "skew", 0.9, "share of the traffic on the hot node in the skewed scenario")
	leases := fs.String("leases", "1,10,100,1000", "fixed lease sizes to compare with adaptive leases")
	fs.Int64Var(&c.keyLimit, "key-limit", 50, "keys scenario: limit per key per second")
	sizes := fs.String("keys-sizes", "10000,100000,1000000", "keys scenario: numbers of keys (Zipf, s=1.1)")
	fs.DurationVar(&c.keysRun, "keys-run", 10*time.Second, "keys scenario: length of each load run")
	fs.IntVar(&c.keysTouch, "keys-touch", 2500, "keys scenario: keys each node touches once, at most (the size if smaller)")
	fs.Float64Var(&c.keysTouchRate, "keys-touch-rate", 1000, "keys scenario: keys touched once per second, over all nodes")
	fs.IntVar(&c.keysFlood, "keys-flood", 20000, "keys scenario: keys each node touches once in the flood run, at most (the size if smaller)")
	fs.Float64Var(&c.keysFloodRate, "keys-flood-rate", 80000, "keys scenario: keys touched once per second in the flood run, over all nodes")
	fs.Float64Var(&c.keysHoldRate, "keys-hold-rate", 10000, "keys scenario: keys per second the holding node touches")
	fs.DurationVar(&c.keysWindow, "keys-window", 5*time.Second, "keys scenario: how long the CPU of a node holding every key, with nothing due, is measured (and its idle CPU before: at 2s the figure moved by ±2.5% of a core from run to run)")
	fs.DurationVar(&c.keysTTL, "keys-ttl", 2*time.Second, "keys scenario: the rules' lease TTL")
	fs.StringVar(&c.heapProfile, "keys-heapprofile", "", "keys scenario: write heap profiles to this path: before each load, with its keys live and two TTLs after it (before-N, live-N, idle-N), before and during the hold phase (unheld-N, hold-N); compare with pprof -base")
	fs.StringVar(&c.touchProfile, "touch-cpuprofile", "", "keys scenario: write a CPU profile of each touch-once phase to this path (the size is added before the extension)")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "length of each run")
	fs.DurationVar(&c.saturate, "saturate", 2*time.Second, "length of each throughput run")
	fs.IntVar(&c.workers, "workers", 4, "goroutines per node")
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL (default: start a redis-server on a free port)")
	fs.StringVar(&c.out, "out", "bench/results", "report folder")
	scen := fs.String("scenarios", "uniform,skew,failover,keys,distance,regions", "scenarios to run (manykeys: the old name of keys)")
	rtts := fs.String("distance-rtts", "0,20ms,50ms,100ms,200ms,500ms", "distance scenario: round trips to the allocator")
	fs.Int64Var(&c.distanceLimit, "distance-limit", 1000, "distance scenario: the rule's limit per second")
	fs.Int64Var(&c.distanceBurst, "distance-burst", 100, "distance scenario: the rule's burst")
	fs.DurationVar(&c.distanceRun, "distance-run", 6*time.Second, "distance scenario: length of each run")
	fs.DurationVar(&c.regionsRTT, "regions-rtt", 150*time.Millisecond, "regions scenario: round trip between each region's allocator and the parent (tree) or the shared Redis; 3 regions of 4 nodes whatever --nodes says")
	regLoads := fs.String("regions-loads", "moving,even", "regions scenario: loads, moving (80% on one region at a time) and even")
	fs.DurationVar(&c.regionsRun, "regions-run", 12*time.Second, "regions scenario: length of each run")
	fs.DurationVar(&c.regionsPeriod, "regions-period", 2*time.Second, "regions scenario: how long the moving load stays on a region")
	failure := fs.String("failure", "0.333,0.667", "failover scenario: kill and restore the allocator at these fractions of the run")
	fs.BoolVar(&c.gubernator, "gubernator", true, "also measure Gubernator v2.13.0 (3 daemons built from bench/gubernator) in the uniform scenario")
	gubAlg := fs.String("gubernator-algorithm", "leaky_bucket", "Gubernator's algorithm for the rule: leaky_bucket (a token bucket) or token_bucket (a fixed window)")
	short := fs.Bool("short", false, "a few seconds in all: small durations, 2,000 keys")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if c.leaseSizes, err = parseInts(*leases); err != nil {
		return nil, fmt.Errorf("--leases: %v", err)
	}
	if c.killAt, c.restoreAt, err = parsePair(*failure); err != nil {
		return nil, fmt.Errorf("--failure: %v", err)
	}
	if c.distanceRTTs, err = parseDurations(*rtts); err != nil {
		return nil, fmt.Errorf("--distance-rtts: %v", err)
	}
	sz, err := parseInts(*sizes)
	if err != nil {
		return nil, fmt.Errorf("--keys-sizes: %v", err)
	}
	for _, n := range sz {
		c.keysSizes = append(c.keysSizes, int(n))
	}
	if c.gubernatorAlg, err = parseGubernatorAlgorithm(*gubAlg); err != nil {
		return nil, fmt.Errorf("--gubernator-algorithm: %v", err)
	}
	for _, ld := range strings.Split(*regLoads, ",") {
		ld = strings.TrimSpace(ld)
		if regionsLoadLabels[ld] == "" {
			return nil, fmt.Errorf("--regions-loads: %q is not moving or even", ld)
		}
		c.regionsLoads = append(c.regionsLoads, ld)
	}
	c.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scen, ",") {
		s = strings.TrimSpace(s)
		if s == "manykeys" {
			s = "keys"
		}
		c.scenarios[s] = true
	}
	if *short {
		c.duration, c.saturate, c.leaseSizes = 1500*time.Millisecond, 300*time.Millisecond, []int64{10, 1000}
		c.limit, c.workers = 2000, 2
		c.distanceRTTs, c.distanceRun = []time.Duration{0, 200 * time.Millisecond}, 1500*time.Millisecond
		c.keysSizes, c.keysRun, c.keysTouch, c.keysWindow, c.keysTTL = []int{2000}, 1500*time.Millisecond, 250, time.Second, time.Second
		c.keysFlood = 1000
		// The regions scenario's smoke: each approach once, under the
		// moving load, 20 ms from what the regions share: about 2.5 s in
		// all (at 150 ms, the shared Redis's allocators alone take 2.5 s
		// to start: they load their scripts a round trip apiece).
		c.regionsLoads, c.regionsRun, c.regionsPeriod, c.regionsRTT = []string{"moving"}, 600*time.Millisecond, 200*time.Millisecond, 20*time.Millisecond
	}
	if c.burst == 0 {
		c.burst = c.limit
	}
	switch {
	case c.nodes < 1:
		return nil, errors.New("--nodes must be at least 1")
	case c.limit < 1 || c.keyLimit < 1:
		return nil, errors.New("--limit and --key-limit must be positive")
	case c.demand <= 0 || c.skew <= 0 || c.skew >= 1:
		return nil, errors.New("--demand must be positive and --skew between 0 and 1")
	case c.duration < time.Second || c.distanceRun < time.Second:
		return nil, errors.New("--duration and --distance-run must be at least 1s")
	case c.regionsRun < 500*time.Millisecond || c.regionsRTT < 0 || c.regionsPeriod <= 0:
		return nil, errors.New("--regions-run must be at least 500ms (a worst second needs 1s), --regions-rtt zero or more and --regions-period positive")
	case c.distanceLimit < 1 || c.distanceBurst < 1:
		return nil, errors.New("--distance-limit and --distance-burst must be positive")
	case slices.Min(c.keysSizes) < 2 || c.keysTouch < 1 || c.keysTouchRate <= 0 || c.keysFlood < 1 || c.keysFloodRate <= 0 || c.keysHoldRate <= 0:
		return nil, errors.New("--keys-sizes must be at least 2, --keys-touch, --keys-touch-rate, --keys-flood, --keys-flood-rate and --keys-hold-rate positive")
	case c.keysRun < time.Second || c.keysWindow < 100*time.Millisecond || c.keysTTL < 100*time.Millisecond:
		return nil, errors.New("--keys-run must be at least 1s, --keys-window and --keys-ttl at least 100ms")
	}
	return c, nil
}

func parseInts(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration of zero or more", f)
		}
		out = append(out, d)
	}
	return out, nil
}

func parsePair(s string) (float64, float64, error) {
	a, b, ok := strings.Cut(s, ",")
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil || !(0 < x && x < y && y < 1) {
		return 0, 0, fmt.Errorf("want two fractions 0 < kill < restore < 1, got %q", s)
	}
	return x, y, nil
}

func progress(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == allocatorFlag {
		if err := serveAllocator(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench allocator:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.heapProfile != "" {
		runtime.MemProfileRate = 4096 // small enough to see what a few MB are made of
	}
	rep, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println(rep.summary())
}
