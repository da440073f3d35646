// Package server is the allocator's gRPC service: it validates what nodes
// send, resolves rules and turns requests into store calls.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/lograte"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Config wires a Server.
type Config struct {
	// Store holds the state. Required.
	Store store.Store
	// Rules is the initial rule set. Required; replace it with SetRules.
	Rules *rules.Set
	// StoreTimeout bounds each store call, so that a dead backend costs
	// milliseconds. default: DefaultStoreTimeout
	StoreTimeout time.Duration
	// Limits bound the input. default: DefaultLimits()
	Limits Limits
	// Metrics receives the allocator's Prometheus metrics. default: none
	Metrics *Metrics
	// Logger. default: slog.Default()
	Logger *slog.Logger
	// Clock paces the rate limit of repeated log lines, and times the
	// count of live nodes (livenodes.go). default: the real clock
	Clock clock.Clock
	// NewKeysPerNode caps the keys one node may add to the store per
	// second (newkeys.go). Negative: no cap. default: DefaultNewKeysPerNode
	NewKeysPerNode float64
}

// Server implements allot.v1.Allocator.
type Server struct {
	allotv1.UnimplementedAllocatorServer
	store   store.Store
	rules   atomic.Pointer[rules.Set]
	timeout time.Duration
	limits  Limits
	metrics *Metrics
	log     *slog.Logger
	// failures logs store failures: an outage fails every call, and one
	// line per call would bury everything else.
	failures *lograte.Logger
	newKeys  *newKeys
	clock    clock.Clock
	live     *liveNodes
}

// DefaultStoreTimeout is Config.StoreTimeout's default, the store's
// (store.DefaultCallTimeout says why).
const DefaultStoreTimeout = store.DefaultCallTimeout

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: Config.Store is required")
	}
	if cfg.Rules == nil {
		return nil, errors.New("server: Config.Rules is required")
	}
	s := &Server{store: cfg.Store, timeout: cfg.StoreTimeout, limits: cfg.Limits.withDefaults(),
		metrics: cfg.Metrics, log: cfg.Logger}
	if s.timeout <= 0 {
		s.timeout = DefaultStoreTimeout
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.clock = cfg.Clock
	if s.clock == nil {
		s.clock = clock.Real()
	}
	s.live = newLiveNodes(liveWindow, maxLive)
	s.failures = lograte.New(s.log, cfg.Clock, 0, 0)
	switch {
	case cfg.NewKeysPerNode == 0:
		s.newKeys = newNewKeys(DefaultNewKeysPerNode)
	case cfg.NewKeysPerNode > 0:
		s.newKeys = newNewKeys(cfg.NewKeysPerNode)
	default:
		s.newKeys = newNewKeys(0)
	}
	s.rules.Store(cfg.Rules)
	s.metrics.rulesLoaded(cfg.Rules)
	return s, nil
}

// Register adds the Allocator service to g.
func (s *Server) Register(g *grpc.Server) { allotv1.RegisterAllocatorServer(g, s) }

// SetRules replaces the rule set; calls in flight finish with the old one.
func (s *Server) SetRules(set *rules.Set) {
	s.rules.Store(set)
	s.metrics.rulesLoaded(set)
}

// Rules returns the current rule set.
func (s *Server) Rules() *rules.Set { return s.rules.Load() }

// Acquire implements allot.v1.Allocator.
func (s *Server) Acquire(ctx context.Context, req *allotv1.AcquireRequest) (*allotv1.AcquireResponse, error) {
	set := s.rules.Load()
	reqs, err := s.acquireRequests(set, req)
	if err != nil {
		return nil, err
	}
	nodes := s.seen(req.GetNodeId())
	divideFirstAsks(reqs, req.GetRequests(), nodes)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.checkNewKeys(ctx, req.GetNodeId(), reqs); err != nil {
		return nil, err
	}
	start := time.Now()
	leases, err := s.store.Acquire(ctx, reqs)
	s.metrics.observeStore("acquire", start, err)
	if err != nil {
		return nil, s.storeError(ctx, "acquire", err)
	}
	resp := &allotv1.AcquireResponse{Leases: make([]*allotv1.Lease, len(leases)), RulesVersion: set.Version(), Nodes: nodes}
	for i, l := range leases {
		r := reqs[i].Rule
		resp.Leases[i] = &allotv1.Lease{
			Rule: r.Name, Key: reqs[i].Key, Granted: l.Granted, Ttl: durationpb.New(l.TTL),
			RetryAfter: durationpb.New(l.RetryAfter), Holders: uint32(l.Holders), FallbackNodes: uint32(min(max(l.FallbackNodes, 0), math.MaxUint32)),
			Limit: r.Limit, Remaining: l.Remaining, Epoch: l.Epoch, Rate: l.Rate,
			FullFor: optDuration(l.FullFor), FullInTtl: optDuration(l.FullInTTL), SlotShare: l.SlotShare,
		}
		s.metrics.observeLease(r.Name, reqs[i].Want, l.Granted, l.Holders)
	}
	return resp, nil
}

// Release implements allot.v1.Allocator.
func (s *Server) Release(ctx context.Context, req *allotv1.ReleaseRequest) (*allotv1.ReleaseResponse, error) {
	set := s.rules.Load()
	if err := s.limits.checkNode(req.GetNodeId()); err != nil {
		return nil, err
	}
	if err := s.limits.checkBatch("returns", len(req.GetReturns())); err != nil {
		return nil, err
	}
	rets := make([]store.Return, len(req.GetReturns()))
	seen := make(map[ruleKey]int, len(rets))
	for i, rt := range req.GetReturns() {
		field := fmt.Sprintf("returns[%d]", i)
		r, err := s.leasableRule(set, field+".rule", rt.GetRule())
		if err != nil {
			return nil, err
		}
		if err := s.limits.checkKey(field+".key", rt.GetKey()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".tokens", rt.GetTokens()); err != nil {
			return nil, err
		}
		if err := s.limits.checkTokens(field+".held", rt.GetHeld()); err != nil {
			return nil, err
		}
		// One entry per key: a repeated one would be credited twice.
		k := ruleKey{r.Name, rt.GetKey()}
		if j, dup := seen[k]; dup {
			return nil, grpcerr.Invalid(field, "repeats the rule and key of returns[%d]", j)
		}
		seen[k] = i
		rets[i] = store.Return{Rule: r.ForKey(rt.GetKey()), Key: rt.GetKey(), Node: req.GetNodeId(), Tokens: rt.GetTokens(), Epoch: rt.GetEpoch(),
			Held: rt.GetHeld(), HeldKnown: rt.Held != nil}
	}
	s.seen(req.GetNodeId())
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	err := s.store.Release(ctx, rets)
	s.metrics.observeStore("release", start, err)
	if err != nil {
		return nil, s.storeError(ctx, "release", err)
	}
	return &allotv1.ReleaseResponse{}, nil
}

// Check implements allot.v1.Allocator.
func (s *Server) Check(ctx context.Context, req *allotv1.CheckRequest) (*allotv1.CheckResponse, error) {
	r, err := lookup(s.rules.Load(), "rule", req.GetRule())
	if err != nil {
		return nil, err
	}
	if r.IsConcurrency() {
		return nil, status.Errorf(codes.FailedPrecondition, "rule: %q is a concurrency rule: its slots are leased with Acquire (slots_kept), not checked", r.Name)
	}
	if err := s.limits.checkKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	r = r.ForKey(req.GetKey())
	cost := req.GetCost()
	if cost == 0 {
		cost = 1
	}
	if err := s.limits.checkTokens("cost", cost); err != nil {
		return nil, err
	}
	if cost > r.Capacity() {
		return nil, grpcerr.Invalid("cost", "%d exceeds the capacity %d of rule %q: it could never pass", cost, r.Capacity(), r.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	d, err := s.store.Check(ctx, r, req.GetKey(), cost)
	s.metrics.observeStore("check", start, err)
	if err != nil {
		return nil, s.storeError(ctx, "check", err)
	}
	s.metrics.observeCheck(r.Name, d.Allowed)
	return &allotv1.CheckResponse{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfter: durationpb.New(d.RetryAfter), ResetAfter: durationpb.New(d.ResetAfter),
	}, nil
}

// GetRules implements allot.v1.Allocator. A node that names itself is
// counted live, so that the count it gets back includes it and the nodes
// before it.
func (s *Server) GetRules(_ context.Context, req *allotv1.GetRulesRequest) (*allotv1.GetRulesResponse, error) {
	if node := req.GetNodeId(); node != "" {
		if err := s.limits.checkNode(node); err != nil {
			return nil, err
		}
		s.seen(node)
	}
	resp := s.rules.Load().ToProto()
	resp.Nodes = uint32(s.live.count(s.clock.Mono()))
	return resp, nil
}

// seen counts a valid call of node as a sign of life and returns the count
// of live nodes.
func (s *Server) seen(node string) uint32 {
	n := s.live.seen(node, s.clock.Mono())
	s.metrics.observeLive(n)
	return uint32(n)
}

// storeError maps a store failure to a status. The caller's own deadline or
// cancellation wins; everything else is the store being unavailable, which
// a node may retry elsewhere.
func (s *Server) storeError(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return status.Error(codes.Canceled, "canceled by the caller")
	case errors.Is(err, store.ErrCostAboveCapacity):
		return grpcerr.Invalid("cost", "%v", err)
	case errors.Is(err, store.ErrNotLeasable):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrFull):
		s.failures.Warn("store full: new keys refused", "op", op, "err", err)
		return storeFull(op, err)
	}
	s.failures.Warn("store call failed", "op", op, "err", err)
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return status.Errorf(codes.Unavailable, "store unavailable: %v", err)
	}
	// Not an outage (a script error, a key of the wrong type): retrying
	// elsewhere will not help, and nodes must not take it for one.
	return status.Errorf(codes.Internal, "store error: %v", err)
}

// storeFull is the status of a call the store refused at its key cap:
// ResourceExhausted naming the cap and its flag, and for Acquire the
// request of the new key first ("requests[3].key: ..."), as other refusals
// of one request are named. There is no RetryInfo: it is no rate-limit
// refusal, and only keys expiring make room.
func storeFull(op string, err error) error {
	flag, subject := "--memory-max-keys", "allocator memory store keys"
	var full *store.FullError
	isFull := errors.As(err, &full)
	if isFull && full.Store == "redis" {
		flag, subject = "--redis-max-keys", "Redis database keys (DBSIZE)"
	}
	msg := fmt.Sprintf("%v (the allocator's %s)", err, flag)
	if isFull && op == "acquire" {
		msg = fmt.Sprintf("requests[%d].key: %s", full.Request, msg)
	}
	return grpcerr.New(codes.ResourceExhausted, msg, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
		{Subject: subject, Description: err.Error()},
	}})
}

// optDuration is d on the wire, or nothing when it is zero: a field most
// answers leave out costs them no allocation.
func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}
