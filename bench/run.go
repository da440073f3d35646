package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/rules"
)

// session is one bench run: a Redis, an allocator process and the rules.
type session struct {
	cfg       *config
	dir       string
	redis     *proc // nil when --redis names a server we did not start
	redisURL  string
	rdb       *redis.Client
	alloc     *proc
	allocAddr string
	rulesFile string
	rules     *rules.Set
	gub       *gubernatorCluster // while the uniform scenario measures Gubernator
}

// row is one strategy's line of the report.
type row struct {
	scenario, strategy string
	lease              int64 // fixed lease size; 0 adaptive; -1 not leased
	res                *result
	ideal              float64
	worst              float64       // most admitted in any 1 s window, over what a token bucket allows in 1 s
	perSec             float64       // decisions per second, saturated
	cmdsClient         float64       // Redis commands sent by clients per 1,000 admitted (steady state)
	cmdsAll            float64       // all Redis commands, scripts' own included, per 1,000 admitted
	allocCPU           float64       // seconds
	redisCPU           float64       // seconds, when the bench started Redis
	rtt                time.Duration // distance scenario: round trip to the allocator
}

func run(cfg *config) (*report, error) {
	s, err := openSession(cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	rep := &report{cfg: cfg}
	steps := []struct {
		name string
		f    func(*session, *report) error
	}{
		{"uniform", (*session).uniform},
		{"skew", (*session).skewed},
		{"keys", (*session).keysScenario},
		{"distance", (*session).distance},
		{"regions", (*session).regions},
		{"failover", (*session).failover},
	}
	for _, st := range steps {
		if !cfg.scenarios[st.name] {
			continue
		}
		progress("== scenario %s", st.name)
		if err := st.f(s, rep); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", st.name, err)
		}
	}
	if err := rep.write(cfg.out); err != nil {
		return nil, err
	}
	return rep, nil
}

func openSession(cfg *config) (*session, error) {
	dir, err := os.MkdirTemp("", "allot-bench-")
	if err != nil {
		return nil, err
	}
	s := &session{cfg: cfg, dir: dir, redisURL: cfg.redisURL}
	if s.redisURL == "" {
		if s.redis, s.redisURL, err = startRedis(dir); err != nil {
			s.close()
			return nil, err
		}
	}
	opts, err := redis.ParseURL(s.redisURL)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	s.rdb = redis.NewClient(opts)
	if err := s.writeRules(); err != nil {
		s.close()
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		s.close()
		return nil, err
	}
	s.allocAddr = fmt.Sprintf("127.0.0.1:%d", port)
	if err := s.startAllocator(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) startAllocator() error {
	p, err := startAllocator(s.allocAddr, s.redisURL, s.rulesFile)
	if err != nil {
		return err
	}
	s.alloc = p
	return nil
}

func (s *session) close() {
	s.gub.kill()
	s.alloc.kill()
	if s.rdb != nil {
		s.rdb.Close()
	}
	s.redis.kill()
	os.RemoveAll(s.dir)
}

// writeRules writes one rule per strategy, so that each starts from a full
// bucket of its own.
func (s *session) writeRules() error {
	c := s.cfg
	var b strings.Builder
	b.WriteString("rules:\n")
	rule := func(name string, limit, burst, min, max int64) {
		fmt.Fprintf(&b, "  - name: %s\n    algorithm: token_bucket\n    limit: %d\n    period: 1s\n    burst: %d\n"+
			"    lease: { min: %d, max: %d, ttl: 2s, refresh: 200ms }\n", name, limit, burst, min, max)
	}
	rule("adaptive", c.limit, c.burst, 1, c.burst)
	for _, size := range c.leaseSizes {
		rule(fmt.Sprintf("fixed-%d", size), c.limit, c.burst, min(size, c.burst), min(size, c.burst))
	}
	rule("check", c.limit, c.burst, 1, c.burst)
	rule("skew", c.limit, c.burst, 1, c.burst)
	rule("failover", c.limit, c.burst, 1, c.burst)
	for _, size := range c.keysSizes {
		for _, phase := range []string{"load", "once", "flood", "hold"} {
			ttl, refresh := c.keysTTL, c.keysTTL/10
			if phase == "hold" {
				// No renewal may come due while the phase measures: touching a
				// million keys at 10,000/s takes longer than a tenth of the TTL.
				ttl, refresh = holdTTL, holdTTL/2
			}
			fmt.Fprintf(&b, "  - name: %s\n    algorithm: token_bucket\n    limit: %d\n    period: 1s\n"+
				"    lease: { min: 1, max: %d, ttl: %v, refresh: %v }\n", keysRule(size, phase), c.keyLimit, c.keyLimit, ttl, refresh)
		}
	}
	for _, rtt := range c.distanceRTTs {
		for _, kind := range distanceKinds {
			rule(distanceRule(kind.name, rtt), c.distanceLimit, c.distanceBurst, 1, c.distanceBurst)
		}
	}
	s.rulesFile = filepath.Join(s.dir, "rules.yaml")
	if err := os.WriteFile(s.rulesFile, []byte(b.String()), 0o600); err != nil {
		return err
	}
	set, err := rules.Load(s.rulesFile)
	s.rules = set
	return err
}

func (s *session) rule(name string) *rules.Rule {
	r, _ := s.rules.Get(name)
	return r
}

// commandStats sums INFO commandstats: calls by clients (EVAL, EVALSHA and
// plain commands) and all calls, those made inside scripts included.
func (s *session) commandStats() (client, all int64) {
	for name, calls := range commandCalls(s.rdb) {
		if name == "dbsize" {
			// (The allocator's poll of the store's size for
			// --redis-max-keys: ten a second, whatever the traffic.)
			continue
		}
		all += calls
		if !scriptInner[name] {
			client += calls
		}
	}
	return client, all
}

// scriptInner are the commands only scripts call (Allot's Lua and the
// per-request baseline's): neither the allocator nor the bench sends them
// itself.
var scriptInner = map[string]bool{"time": true, "get": true, "set": true, "hgetall": true, "hmget": true, "hset": true,
	"hdel": true, "pexpire": true, "del": true, "zadd": true, "zcount": true, "zremrangebyscore": true,
	"zremrangebyrank": true, "zrangebyscore": true, "zrange": true, "zcard": true}

// commandCalls is INFO commandstats by command, less the bench's own
// (INFO, CONFIG RESETSTAT).
func commandCalls(rdb *redis.Client) map[string]int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" || name == "config|resetstat" {
			continue
		}
		var calls int64
		fmt.Sscanf(rest[strings.Index(rest, "calls=")+len("calls="):], "%d", &calls)
		out[name] = calls
	}
	return out
}

func (s *session) resetStats() { s.rdb.ConfigResetStat(context.Background()) }

func (s *session) cpu() (alloc, redis float64) {
	if s.alloc != nil {
		alloc = s.alloc.cpuSeconds()
	}
	if s.redis != nil {
		redis = s.redis.cpuSeconds()
	}
	return alloc, redis
}

// centralCPU is a strategy whose central part is not the allocator
// (Gubernator's daemons): the report's allocator CPU is its CPU.
type centralCPU interface{ cpuSeconds() float64 }

// measure runs one strategy through the load, then saturates it, and fills
// a row. Redis statistics are reset after a warm-up of a fifth of the run,
// so the command counts are those of the steady state.
func (s *session) measure(scenario, name string, lease int64, st strategy, l load, r *rules.Rule) row {
	progress("  %-22s %s at %.0f/s offered for %v", name, scenario, sum(l.rates), l.duration)
	warm := l.duration / 5
	s.resetStats()
	cpu := s.cpu
	if c, ok := st.(centralCPU); ok {
		cpu = func() (float64, float64) { _, redis := s.cpu(); return c.cpuSeconds(), redis }
	}
	var allocCPU, redisCPU float64
	l.events = append([]event{{at: warm, what: "warm-up over: Redis statistics reset", do: func() {
		s.resetStats()
		allocCPU, redisCPU = cpu()
	}}}, l.events...)
	res := drive(st, l)
	a1, r1 := cpu()
	client, all := s.commandStats()
	row := row{scenario: scenario, strategy: name, lease: lease, res: res, allocCPU: a1 - allocCPU, redisCPU: r1 - redisCPU}
	row.ideal = ideal(res, r)
	row.worst = worstWindow(res.bins, float64(r.Burst)+r.Rate())
	if steady := admittedAfter(res, warm); steady > 0 {
		row.cmdsClient = 1000 * float64(client) / float64(steady)
		row.cmdsAll = 1000 * float64(all) / float64(steady)
	}
	if s.cfg.saturate > 0 && l.saturate {
		row.perSec = saturate(st, s.cfg.nodes, s.cfg.workers, s.cfg.saturate)
	}
	progress("  %-22s admitted/ideal %.3f, worst 1s %.2fx, %.0f decisions/s saturated, p99 %v, Redis %.1f (%.1f) per 1k admitted",
		name, float64(res.admitted)/row.ideal, row.worst, row.perSec, res.latency.quantile(0.99), row.cmdsClient, row.cmdsAll)
	if res.perKeyOff != nil {
		progress("  %-22s %s", "", lossByDemand(res, r, row.ideal))
	}
	return row
}

func uniformRates(nodes int, total float64) []float64 {
	r := make([]float64, nodes)
	for i := range r {
		r[i] = total / float64(nodes)
	}
	return r
}

func (s *session) baseLoad(rates []float64, keys int) load {
	return load{rates: rates, workers: s.cfg.workers, keys: keys, duration: s.cfg.duration}
}

// candidate is one strategy of the uniform scenario: its row's name, its
// fixed lease size (0 adaptive, -1 not leased), the rule it is measured
// against, and how to start it.
type candidate struct {
	name  string
	lease int64
	rule  string
	make  func() (strategy, error)
}

// optionalError is a strategy's failure to start that skips its row, with
// why, instead of failing the run.
type optionalError struct{ error }

// uniform compares every strategy under uniform load at demand x the limit.
func (s *session) uniform(rep *report) error {
	c := s.cfg
	l := s.baseLoad(uniformRates(c.nodes, c.demand*float64(c.limit)), 1)
	l.saturate = true
	hybridOn := func(rule string) func() (strategy, error) {
		return func() (strategy, error) { return newHybrid(rule, c.nodes, []string{s.allocAddr}) }
	}
	cands := []candidate{{"allot adaptive", 0, "adaptive", hybridOn("adaptive")}}
	for _, size := range c.leaseSizes {
		name := fmt.Sprintf("fixed-%d", size)
		cands = append(cands, candidate{"allot lease " + fmt.Sprint(size), size, name, hybridOn(name)})
	}
	cands = append(cands,
		candidate{"Check RPC per request", -1, "check", func() (strategy, error) { return newCheckRPC("check", c.nodes, s.allocAddr) }},
		candidate{"Redis Lua per request", -1, "adaptive", func() (strategy, error) {
			return newPerRequestRedis(s.rule("adaptive"), c.nodes, s.redisURL, "classic:uniform:")
		}},
		candidate{"local only (limit/N)", -1, "adaptive", func() (strategy, error) { return newLocalOnly(s.rule("adaptive"), c.nodes), nil }},
	)
	cands = append(cands, s.gubernatorCandidates()...)
	defer s.stopGubernator()
	for _, cand := range cands {
		st, err := cand.make()
		if opt := (optionalError{}); errors.As(err, &opt) {
			progress("  %s skipped: %v", cand.name, opt.error)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", cand.name, err)
		}
		rep.rows = append(rep.rows, s.measure("uniform", cand.name, cand.lease, st, l, s.rule(cand.rule)))
		st.close()
	}
	return nil
}

// skewed puts most of the traffic on one node.
func (s *session) skewed(rep *report) error {
	c := s.cfg
	total := c.demand * float64(c.limit)
	rates := uniformRates(c.nodes, (1-c.skew)*total*float64(c.nodes)/float64(max(c.nodes-1, 1)))
	rates[0] = c.skew * total
	if c.nodes == 1 {
		rates[0] = total
	}
	l := s.baseLoad(rates, 1)
	r := s.rule("skew")
	for _, cand := range []struct {
		name string
		make func() (strategy, error)
	}{
		{"allot adaptive", func() (strategy, error) { return newHybrid("skew", c.nodes, []string{s.allocAddr}) }},
		{"Redis Lua per request", func() (strategy, error) { return newPerRequestRedis(r, c.nodes, s.redisURL, "classic:skew:") }},
		{"local only (limit/N)", func() (strategy, error) { return newLocalOnly(r, c.nodes), nil }},
	} {
		st, err := cand.make()
		if err != nil {
			return fmt.Errorf("%s: %w", cand.name, err)
		}
		rep.rows = append(rep.rows, s.measure("skew", cand.name, -1, st, l, r)) // saturation: in the uniform scenario
		st.close()
	}
	return nil
}

// failover kills the allocator a third of the way in and restores it at
// two thirds.
func (s *session) failover(rep *report) error {
	c := s.cfg
	st, err := newHybrid("failover", c.nodes, []string{s.allocAddr})
	if err != nil {
		return err
	}
	defer st.close()
	l := s.baseLoad(uniformRates(c.nodes, c.demand*float64(c.limit)), 1)
	kill := time.Duration(float64(c.duration) * c.killAt)
	restore := time.Duration(float64(c.duration) * c.restoreAt)
	var restartErr error
	l.events = []event{
		{at: kill, what: "allocator killed (SIGKILL)", do: func() { s.alloc.kill() }},
		{at: restore, what: "allocator restarted", do: func() { restartErr = s.startAllocator() }},
	}
	progress("  allot adaptive         failover at %.0f/s offered for %v", sum(l.rates), l.duration)
	res := drive(st, l)
	if restartErr != nil {
		return restartErr
	}
	rep.failover = &failoverRun{res: res, kill: kill, restore: restore, rule: s.rule("failover")}
	return nil
}
