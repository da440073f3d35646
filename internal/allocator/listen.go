package allocator

// The allocator's listeners: gRPC, with its credentials, interceptors and
// services, and the HTTP port of /metrics and /healthz.

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/server"
)

func (a *Allocator) listen() error {
	addr := a.cfg.Listen
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	a.lis = lis
	// Every call is counted; a request that does not decode is refused as
	// InvalidArgument; the rest are authenticated, then bounded.
	opts := append(a.serverCreds(), grpc.ChainUnaryInterceptor(a.metrics.UnaryInterceptor()))
	opts = append(opts, server.DecodeOptions()...)
	opts = append(opts,
		grpc.ChainUnaryInterceptor(a.guard.unary(), a.shed.unary()),
		grpc.ChainStreamInterceptor(a.guard.stream()),
		// Nodes keep their connection warm with pings; allow them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	a.grpc = grpc.NewServer(opts...)
	a.server.Register(a.grpc)
	a.envoy.Register(a.grpc)
	server.NewAdmin(a.server, a.overlay).Register(a.grpc)
	a.metrics.InitServices(&allotv1.Allocator_ServiceDesc, &rlspb.RateLimitService_ServiceDesc)
	a.health = a.storeOK.grpc
	healthpb.RegisterHealthServer(a.grpc, a.health)
	if a.guard.reflection != AccessOff {
		reflection.Register(a.grpc)
	}
	if err := a.listenEnvoy(opts); err != nil {
		lis.Close()
		return err
	}
	if a.cfg.MetricsListen == "" {
		return nil
	}
	httpLis, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		lis.Close()
		if a.envoyLis != nil {
			a.envoyLis.Close()
		}
		return fmt.Errorf("--metrics: %w", err)
	}
	a.httpLis = a.metricsListener(httpLis)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", a.storeOK)
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)} // e.g. refused TLS handshakes, structured
	return nil
}

// Addr is the gRPC address the allocator listens on.
func (a *Allocator) Addr() string { return a.lis.Addr().String() }

// MetricsAddr is the HTTP address of /metrics, or "" when there is none.
func (a *Allocator) MetricsAddr() string {
	if a.httpLis == nil {
		return ""
	}
	return a.httpLis.Addr().String()
}
