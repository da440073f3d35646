package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allot-dev/allot/internal/rules"
)

// The bench runs Gubernator (github.com/gubernator-io/gubernator/v2,
// v2.13.0) beside Allot: three daemons on 127.0.0.1, each a process of
// bench/gubernator, a module of its own so that Gubernator stays out of
// Allot's go.mod. The nodes call the daemons' GetRateLimits once per
// decision, node i on daemon i mod 3, as a fleet whose nodes each call the
// Gubernator peer next to them.

// gubernatorModule is the module path of bench/gubernator.
const gubernatorModule = "github.com/allot-dev/allot/bench/gubernator"

const gubernatorDaemons = 3

// gubernatorSource finds bench/gubernator: from the repository's root
// (go run ./bench), from bench/ (go test), or beside this file.
func gubernatorSource() (string, error) {
	dirs := []string{filepath.Join("bench", "gubernator"), "gubernator"}
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Join(filepath.Dir(file), "gubernator"))
	}
	for _, d := range dirs {
		mod, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module "+gubernatorModule+"\n") {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("module %s not found in %s", gubernatorModule, strings.Join(dirs, ", "))
}

// buildGubernator builds the daemon into dir and returns the binary's
// path. The first build compiles Gubernator and its dependencies (minutes
// on a small machine); later ones link from the build cache.
func buildGubernator(dir string) (string, error) {
	src, err := gubernatorSource()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("the go command is not on PATH")
	}
	bin := filepath.Join(dir, "gubernator")
	out, err := exec.Command(goTool, "build", "-C", src, "-o", bin, ".").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 6 {
			lines = append(lines[:5], fmt.Sprintf("… (%d lines more)", len(lines)-5))
		}
		return "", fmt.Errorf("go build -C %s: %v\n%s", src, err, strings.Join(lines, "\n"))
	}
	return bin, nil
}

// gubernatorCluster is the daemons, one process each.
type gubernatorCluster struct {
	addrs []string
	procs []*proc
}

// startGubernator starts the daemons with each other as peers and waits
// until each reports itself healthy with every peer known.
func startGubernator(bin string) (*gubernatorCluster, error) {
	g := &gubernatorCluster{}
	for range gubernatorDaemons {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		g.addrs = append(g.addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	for _, addr := range g.addrs {
		cmd := exec.Command(bin, "--listen", addr, "--peers", strings.Join(g.addrs, ","))
		// The daemon stops when its standard input closes: if the bench
		// dies without killing it, it does not outlive the bench.
		if _, err := cmd.StdinPipe(); err != nil {
			g.kill()
			return nil, err
		}
		p, err := startCmd(cmd, "gubernator ready on", 20*time.Second)
		if err != nil {
			g.kill()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	if err := g.waitHealthy(10 * time.Second); err != nil {
		g.kill()
		return nil, err
	}
	return g, nil
}

func (g *gubernatorCluster) waitHealthy(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for _, addr := range g.addrs {
		conn, err := dialGubernator(addr)
		if err != nil {
			return err
		}
		for {
			var out wireMsg
			err = conn.Invoke(ctx, gubernatorHealthCheck, &wireMsg{}, &out)
			if err == nil {
				var h healthCheckResp
				if h, err = decodeHealthCheckResp(out.b); err == nil && (h.status != "healthy" || h.peerCount != gubernatorDaemons) {
					err = fmt.Errorf("%s, %d peers: %s", h.status, h.peerCount, h.message)
				}
			}
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		conn.Close()
		if err != nil {
			return fmt.Errorf("gubernator %s not healthy within %v: %w", addr, within, err)
		}
	}
	return nil
}

func (g *gubernatorCluster) cpuSeconds() float64 {
	total := 0.0
	for _, p := range g.procs {
		total += p.cpuSeconds()
	}
	return total
}

func (g *gubernatorCluster) kill() {
	if g == nil {
		return
	}
	for _, p := range g.procs {
		p.kill()
	}
	g.procs = nil
}

// dialGubernator connects to a daemon with the codec that sends the
// bench's own encoding of Gubernator's messages.
func dialGubernator(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wireCodec{})))
}

// gubernatorLimit maps a token bucket of rate R a second and burst B to
// Gubernator's (limit, duration, burst): limit B, duration B/R (whole
// milliseconds), burst B.
//
// LEAKY_BUCKET (the default here) is then the bench's rule: it starts
// full at burst B and refills at limit/duration = R a second up to B, as
// a token bucket does. limit = burst, because GLOBAL's copies on the
// other daemons take the limit as their burst. The duration is also how
// long an idle key lives: after B/R idle the bucket would be full anyway.
//
// TOKEN_BUCKET (--gubernator-algorithm token_bucket) is, despite its name,
// a fixed window: B tokens per window of B/R, all of them back when the
// window, which starts at the key's first hit, ends; burst is ignored.
// Its rate and largest burst are the rule's, but it refills at once
// instead of continuously.
//
// What differs either way: the duration is in whole milliseconds, so the
// rate is B/round(1000·B/R) a millisecond (exact for the bench's rules).
func gubernatorLimit(r *rules.Rule) (limit, durationMs, burst int64) {
	durationMs = max(int64(math.Round(1000*float64(r.Burst)/r.Rate())), 1)
	return r.Burst, durationMs, r.Burst
}

// gubernatorLimiter decides every request with one GetRateLimits call.
type gubernatorLimiter struct {
	cluster *gubernatorCluster
	conns   []*grpc.ClientConn // one per node
	req     rateLimitReq       // every field but the key
	errs    atomic.Int64
	once    sync.Once
	first   error
}

// newGubernator connects node i to daemon i mod 3. name is the rate
// limit's name in Gubernator, one per row, so that each starts full.
func newGubernator(g *gubernatorCluster, r *rules.Rule, nodes int, name string, alg gubernatorAlgorithm, b gubernatorBehavior) (*gubernatorLimiter, error) {
	limit, duration, burst := gubernatorLimit(r)
	s := &gubernatorLimiter{cluster: g, req: rateLimitReq{name: name, hits: 1, limit: limit, durationMs: duration,
		algorithm: alg, behavior: b, burst: burst}}
	for i := range nodes {
		conn, err := dialGubernator(g.addrs[i%len(g.addrs)])
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, conn)
	}
	return s, nil
}

func (s *gubernatorLimiter) decide(ctx context.Context, node int, key string) (bool, bool) {
	call, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r := s.req
	r.uniqueKey = key
	var out wireMsg
	err := s.conns[node].Invoke(call, gubernatorGetRateLimits, &wireMsg{b: appendRateLimitReq(nil, r)}, &out)
	var resps []rateLimitResp
	if err == nil {
		resps, err = decodeRateLimitsResp(out.b)
	}
	if err == nil && len(resps) != 1 {
		err = fmt.Errorf("%d responses to one request", len(resps))
	}
	if err == nil && resps[0].err != "" {
		err = errors.New(resps[0].err)
	}
	if err != nil {
		if ctx.Err() == nil { // not the end of the run
			s.errs.Add(1)
			s.once.Do(func() { s.first = err })
		}
		return false, false
	}
	return !resps[0].overLimit, false
}

// cpuSeconds is the daemons' CPU time, for the report's central CPU.
func (s *gubernatorLimiter) cpuSeconds() float64 { return s.cluster.cpuSeconds() }

func (s *gubernatorLimiter) close() {
	for _, c := range s.conns {
		c.Close()
	}
	if n := s.errs.Load(); n > 0 {
		progress("  gubernator: %d calls failed (refusals in the row); the first: %v", n, s.first)
	}
}

// parseGubernatorAlgorithm reads --gubernator-algorithm.
func parseGubernatorAlgorithm(s string) (gubernatorAlgorithm, error) {
	switch s {
	case "leaky_bucket":
		return gubernatorLeakyBucket, nil
	case "token_bucket":
		return gubernatorTokenBucket, nil
	}
	return 0, fmt.Errorf("%q is neither leaky_bucket nor token_bucket", s)
}

// gubernatorCandidates are Gubernator's rows of the uniform scenario, GLOBAL
// and the default behaviour, on the adaptive rule's numbers. When the
// daemons cannot be built there are none, and the bench says why.
func (s *session) gubernatorCandidates() []candidate {
	c := s.cfg
	if !c.gubernator {
		return nil
	}
	progress("  building Gubernator's daemons (bench/gubernator; the first build takes minutes)")
	bin, err := buildGubernator(s.dir)
	if err != nil {
		progress("  Gubernator skipped: %v", err)
		return nil
	}
	alg := ""
	if c.gubernatorAlg == gubernatorTokenBucket {
		alg = ", TOKEN_BUCKET"
	}
	on := func(name string, b gubernatorBehavior) func() (strategy, error) {
		return func() (strategy, error) {
			if s.gub == nil {
				g, err := startGubernator(bin)
				if err != nil {
					return nil, optionalError{fmt.Errorf("starting Gubernator: %w", err)}
				}
				s.gub = g
			}
			return newGubernator(s.gub, s.rule("adaptive"), c.nodes, name, c.gubernatorAlg, b)
		}
	}
	return []candidate{
		{"Gubernator GLOBAL" + alg, -1, "adaptive", on("bench-global", gubernatorGlobal)},
		{"Gubernator default" + alg, -1, "adaptive", on("bench-default", gubernatorBatching)},
	}
}

// stopGubernator stops the daemons, if they run.
func (s *session) stopGubernator() {
	s.gub.kill()
	s.gub = nil
}

// gubernatorRows are the report's Gubernator rows, in their order.
func (r *report) gubernatorRows() []*row {
	var out []*row
	for i := range r.rows {
		if w := &r.rows[i]; w.scenario == "uniform" && strings.HasPrefix(w.strategy, "Gubernator ") {
			out = append(out, w)
		}
	}
	return out
}

// gubernatorText says, under the table, how Gubernator was run.
func (r *report) gubernatorText() string {
	if len(r.gubernatorRows()) == 0 {
		return ""
	}
	alg := "LEAKY_BUCKET (a token bucket: it starts full and refills continuously)"
	if r.cfg.gubernatorAlg == gubernatorTokenBucket {
		alg = "TOKEN_BUCKET (a fixed window from the key's first hit: all of it back when the window ends)"
	}
	limit, duration, burst := gubernatorLimit(&rules.Rule{Limit: r.cfg.limit, Period: time.Second, Burst: r.cfg.burst})
	return fmt.Sprintf("\nGubernator v2.13.0: %d daemons on 127.0.0.1, each its own process (bench/gubernator) with Gubernator's default settings; "+
		"node i calls daemon i mod %d, one GetRateLimits of one hit per decision. The rule is %s with limit %d, duration %dms and burst %d. "+
		"GLOBAL answers from each daemon's copy and sends the hits to the key's owner every 100 ms; the default behaviour forwards each "+
		"request to the owner, batched (500 µs). Its CPU (the three daemons together) is in the allocator's column; it sends no Redis command.\n",
		gubernatorDaemons, gubernatorDaemons, alg, limit, duration, burst)
}
