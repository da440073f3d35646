// Package envoy serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from the
// allocator's store, for Envoy's global rate limit filter: a drop-in for
// envoyproxy/ratelimit, configured by the rules file's envoy section.
//
// Each descriptor of a request is matched against its domain's descriptors
// (rules.EnvoyDomain.Lookup); each matched limit is a rule decided by the
// store's Check. The limits of one request are spent all or none
// (decide.go): a request refused by one limit costs nothing on the others.
// It is a central decision per request, not Allot's leased hot path.
package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/lograte"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// StoreObserver times store calls; *server.Metrics is one.
type StoreObserver interface {
	ObserveStore(op string, start time.Time, err error)
}

// Config wires a Service.
type Config struct {
	// Store decides every limit. Required.
	Store store.Store
	// Rules returns the rule set being served; its envoy section is read
	// for each request, so a reload applies to the next one. Required.
	Rules func() *rules.Set
	// StoreTimeout bounds each store call. default: 100ms
	StoreTimeout time.Duration
	// Registerer receives the service's metrics. default: none
	Registerer prometheus.Registerer
	// StoreMetrics times the store calls. default: none
	StoreMetrics StoreObserver
	// Logger. default: slog.Default()
	Logger *slog.Logger
	// Clock paces the rate limit of repeated log lines, and places the
	// windows of the limits that refuse without a store call (a limit of
	// 0, hits above a limit) for their reset. default: the real clock
	Clock clock.Clock
}

// Service implements envoy.service.ratelimit.v3.RateLimitService.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	store    store.Store
	rules    func() *rules.Set
	timeout  time.Duration
	metrics  *metrics
	observe  StoreObserver
	failures *lograte.Logger
	clock    clock.Clock
}

// New checks cfg and returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("envoy: Config.Store is required")
	}
	if cfg.Rules == nil {
		return nil, errors.New("envoy: Config.Rules is required")
	}
	s := &Service{store: cfg.Store, rules: cfg.Rules, timeout: cfg.StoreTimeout, observe: cfg.StoreMetrics}
	if s.timeout <= 0 {
		s.timeout = 100 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s.clock = cfg.Clock
	if s.clock == nil {
		s.clock = clock.Real()
	}
	s.failures = lograte.New(log, s.clock, 0, 0)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// Register adds the service to g.
func (s *Service) Register(g *grpc.Server) { rlspb.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	env := s.rules().Envoy()
	var dom *rules.EnvoyDomain
	if env != nil {
		dom, _ = env.Domain(req.GetDomain())
	}
	checks, err := match(dom, req)
	if err != nil {
		return nil, err
	}
	if err := s.decide(ctx, checks); err != nil {
		return nil, s.storeError(ctx, err)
	}
	resp := respond(checks)
	if env != nil {
		resp.ResponseHeadersToAdd = headers(env.Headers, checks, resp.OverallCode)
	}
	s.metrics.observe(dom, checks, resp.OverallCode)
	return resp, nil
}

// storeError maps a store failure to a status, as the Allocator service
// does: the caller's own end wins; the rest is Unavailable (Envoy then
// applies its failure_mode_deny) unless it is not an outage.
func (s *Service) storeError(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return status.Error(codes.Canceled, "canceled by the caller")
	}
	s.failures.Warn("store call failed", "op", "envoy", "err", err)
	if errors.Is(err, store.ErrFull) { // a new key at the store's key cap
		return status.Errorf(codes.ResourceExhausted, "%v", err)
	}
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return status.Errorf(codes.Unavailable, "store unavailable: %v", err)
	}
	return status.Errorf(codes.Internal, "store error: %v", err)
}

// timed runs one store Check under the store timeout and times it.
func (s *Service) timed(ctx context.Context, op string, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	d, err := s.store.Check(ctx, r, key, cost)
	if s.observe != nil {
		s.observe.ObserveStore(op, start, err)
	}
	if err != nil {
		return d, fmt.Errorf("%s on rule %s: %w", op, r.Name, err)
	}
	return d, nil
}
