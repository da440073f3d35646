package allocator

import (
	"context"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// shedder bounds the store calls in flight, in all and per node_id. A call
// over a bound is answered ResourceExhausted at once: no queue forms, so a
// flood costs the allocator a counter and a status, and one flooding node
// cannot take the slots of the others. Nodes take ResourceExhausted as
// "allocator unreachable" and use their fallback allowance until it passes.
type shedder struct {
	max, perNode int // <= 0: no bound

	mu    sync.Mutex
	total int
	nodes map[string]int

	inflight prometheus.Gauge
	shed     *prometheus.CounterVec
}

func newShedder(max, perNode int, reg prometheus.Registerer) *shedder {
	s := &shedder{max: max, perNode: perNode, nodes: make(map[string]int),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_allocator_inflight_calls", Help: boundedNames() + " calls being served (what --max-inflight bounds).",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_allocator_shed_total", Help: "Calls refused with ResourceExhausted because too many were in flight, by method and bound (fleet or node).",
		}, []string{"method", "bound"}),
	}
	reg.MustRegister(s.inflight, s.shed)
	for _, m := range boundedMethods { // every series from 0, so that rates and dashboards see them
		for _, b := range []string{"fleet", "node"} {
			s.shed.WithLabelValues(path.Base(m), b)
		}
	}
	return s
}

// boundedMethods are the methods that reach the store.
var boundedMethods = []string{allotv1.Allocator_Acquire_FullMethodName, allotv1.Allocator_Release_FullMethodName,
	allotv1.Allocator_Check_FullMethodName, rlspb.RateLimitService_ShouldRateLimit_FullMethodName}

func bounded(method string) bool { return slices.Contains(boundedMethods, method) }

// boundedNames lists the bounded methods for a help text: "A, B and C",
// from the list itself, so that the text names every method counted.
func boundedNames() string {
	names := make([]string, len(boundedMethods))
	for i, m := range boundedMethods {
		names[i] = path.Base(m)
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// enter takes a slot for node ("" for calls without one) or says which
// bound is full.
func (s *shedder) enter(node string) (bound string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 && s.total >= s.max {
		return "fleet"
	}
	if node != "" && s.perNode > 0 && s.nodes[node] >= s.perNode {
		return "node"
	}
	s.total++
	if node != "" {
		s.nodes[node]++
	}
	s.inflight.Set(float64(s.total))
	return ""
}

func (s *shedder) leave(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if node != "" {
		if s.nodes[node]--; s.nodes[node] <= 0 {
			delete(s.nodes, node)
		}
	}
	s.inflight.Set(float64(s.total))
}

func (s *shedder) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !bounded(info.FullMethod) {
			return handler(ctx, req)
		}
		var node string
		if r, ok := req.(nodeRequest); ok {
			node = r.GetNodeId()
		}
		if bound := s.enter(node); bound != "" {
			s.shed.WithLabelValues(path.Base(info.FullMethod), bound).Inc()
			if bound == "node" {
				return nil, status.Errorf(codes.ResourceExhausted, "allocator busy: node %q has %d calls in flight, the most one node may have", node, s.perNode)
			}
			return nil, status.Errorf(codes.ResourceExhausted, "allocator busy: %d calls in flight, the most it serves at once", s.max)
		}
		defer s.leave(node)
		return handler(ctx, req)
	}
}
