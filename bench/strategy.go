package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
)

// strategy is one way for a fleet to limit: it decides one request of one
// node on one key, and says whether a fallback made the decision.
type strategy interface {
	decide(ctx context.Context, node int, key string) (allowed, fallback bool)
	close()
}

// hybrid is Allot: every node embeds a Client leasing from the allocators.
type hybrid struct {
	rule    string
	clients []*client.Client
	regs    []*prometheus.Registry // each client's metrics
}

func newHybrid(rule string, nodes int, allocators []string) (*hybrid, error) {
	return newHybridVia(rule, nodes, func(int) []string { return allocators }, hybridOptions{})
}

// hybridOptions are what the distance scenario changes in each node.
type hybridOptions struct {
	tokensOnly bool          // lease tokens only, as before rate shares
	roundTrip  time.Duration // how far the allocator is, for the timeouts
	id         string        // the nodes' ID prefix; default "node"
	fleet      int           // the fleet size each node assumes (Config.Nodes); default the nodes started
}

// newHybridVia starts nodes that dial the allocators via(node) gives.
func newHybridVia(rule string, nodes int, via func(node int) []string, o hybridOptions) (*hybrid, error) {
	h := &hybrid{rule: rule}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.id == "" {
		o.id = "node"
	}
	if o.fleet == 0 {
		o.fleet = nodes
	}
	for i := range nodes {
		reg := prometheus.NewRegistry()
		c, err := client.New(client.Config{Allocators: via(i), NodeID: fmt.Sprintf("%s-%d", o.id, i), Registerer: reg,
			Nodes: o.fleet, Logger: quiet, StartTimeout: 5*time.Second + 3*o.roundTrip,
			RPCTimeout: 250*time.Millisecond + 2*o.roundTrip, Lease: client.LeaseConfig{TokensOnly: o.tokensOnly}})
		if err != nil {
			h.close()
			return nil, err
		}
		h.clients = append(h.clients, c)
		h.regs = append(h.regs, reg)
	}
	return h, nil
}

// calls counts the allocator calls of one method (Acquire, Release) the
// nodes made, over all nodes: the samples of allot_client_rpc_seconds.
func (h *hybrid) calls(method string) uint64 {
	var n uint64
	for _, reg := range h.regs {
		fams, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, f := range fams {
			if f.GetName() != "allot_client_rpc_seconds" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "method" && l.GetValue() == method {
						n += m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
	}
	return n
}

func (h *hybrid) decide(ctx context.Context, node int, key string) (bool, bool) {
	d, err := h.clients[node].AllowN(ctx, h.rule, key, 1)
	return err == nil && d.Allowed, d.Mode == client.ModeFallback
}

// keys counts the keys the nodes hold, over all nodes.
func (h *hybrid) keys() int {
	n := 0
	for _, c := range h.clients {
		n += c.Keys()
	}
	return n
}

func (h *hybrid) close() {
	var wg sync.WaitGroup
	for _, c := range h.clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
}

// checkRPC decides every request with one Check call to the allocator.
type checkRPC struct {
	rule  string
	conns []*grpc.ClientConn
	apis  []allotv1.AllocatorClient
}

func newCheckRPC(rule string, nodes int, addr string) (*checkRPC, error) {
	s := &checkRPC{rule: rule}
	for range nodes {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, conn)
		s.apis = append(s.apis, allotv1.NewAllocatorClient(conn))
	}
	return s, nil
}

func (s *checkRPC) decide(ctx context.Context, node int, key string) (bool, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := s.apis[node].Check(ctx, &allotv1.CheckRequest{Rule: s.rule, Key: key, Cost: 1})
	return err == nil && resp.GetAllowed(), false
}

func (s *checkRPC) close() {
	for _, c := range s.conns {
		c.Close()
	}
}

// classicScript is the per-request central limiter of the classic
// guidance: one token-bucket Lua call per decision, time from Redis TIME,
// a TTL on the key.
//
//go:embed classic.lua
var classicScript string

type perRequestRedis struct {
	rdbs   []*redis.Client
	script *redis.Script
	prefix string
	args   []any
}

func newPerRequestRedis(r *rules.Rule, nodes int, url, prefix string) (*perRequestRedis, error) {
	return newPerRequestRedisVia(r, nodes, func(int) string { return "" }, url, prefix)
}

// newPerRequestRedisVia connects node i to Redis through the address
// via(i) gives, or directly when it gives "".
func newPerRequestRedisVia(r *rules.Rule, nodes int, via func(node int) string, url, prefix string) (*perRequestRedis, error) {
	s := &perRequestRedis{script: redis.NewScript(classicScript), prefix: prefix,
		args: []any{r.Rate() / 1e6, r.Burst, 1}}
	for i := range nodes {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		if addr := via(i); addr != "" {
			opts.Addr = addr
			opts.ReadTimeout, opts.WriteTimeout = 10*time.Second, 10*time.Second
		}
		s.rdbs = append(s.rdbs, redis.NewClient(opts))
	}
	return s, nil
}

func (s *perRequestRedis) decide(ctx context.Context, node int, key string) (bool, bool) {
	n, err := s.script.Run(ctx, s.rdbs[node], []string{s.prefix + key}, s.args...).Int()
	return err == nil && n == 1, false
}

func (s *perRequestRedis) close() {
	for _, r := range s.rdbs {
		r.Close()
	}
}

// localOnly gives every node limit/N with burst/N and no coordination: the
// fallback allowance alone, on every node.
type localOnly struct {
	rule  *rules.Rule
	nodes int
	start time.Time
	mu    []sync.Mutex
	keys  []map[string]*fallback.Allowance
}

func newLocalOnly(r *rules.Rule, nodes int) *localOnly {
	l := &localOnly{rule: r, nodes: nodes, start: time.Now(), mu: make([]sync.Mutex, nodes), keys: make([]map[string]*fallback.Allowance, nodes)}
	for i := range l.keys {
		l.keys[i] = make(map[string]*fallback.Allowance)
	}
	return l
}

func (l *localOnly) decide(_ context.Context, node int, key string) (bool, bool) {
	now := time.Since(l.start)
	l.mu[node].Lock()
	a, ok := l.keys[node][key]
	if !ok {
		a = fallback.NewAllowance()
		l.keys[node][key] = a
	}
	l.mu[node].Unlock()
	res, _ := a.Decide(l.rule, l.nodes, fallback.Windows{}, now, 1)
	a.TakeConsumed(now) // (nobody reports them)
	return res.Allowed, false
}

func (l *localOnly) close() {}
