package allocator

import (
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-dev/allot/internal/envoy"
)

// The Envoy rate limit service (internal/envoy) is served on the gRPC port
// beside the Allocator service, and also, with Config.EnvoyListen, on a
// port of its own that serves only it and health checks: a network policy
// can then let Envoy reach that port alone. Both ports use the same
// credentials, interceptors and bounds; the service reads the rules file's
// envoy section, so a reload changes what it answers.

// setupEnvoy builds the service on the allocator's store and rules.
func (a *Allocator) setupEnvoy() error {
	svc, err := envoy.New(envoy.Config{Store: a.lending, Rules: a.server.Rules, StoreTimeout: a.cfg.StoreTimeout,
		Registerer: a.registry, StoreMetrics: a.metrics, Logger: a.log, Clock: a.clock})
	if err != nil {
		return err
	}
	a.envoy = svc
	svc.RulesLoaded(a.server.Rules())
	return nil
}

// listenEnvoy binds Config.EnvoyListen, if given, with the options of the
// main gRPC server.
func (a *Allocator) listenEnvoy(opts []grpc.ServerOption) error {
	if a.cfg.EnvoyListen == "" {
		return nil
	}
	lis, err := net.Listen("tcp", a.cfg.EnvoyListen)
	if err != nil {
		return fmt.Errorf("--envoy-listen: %w", err)
	}
	a.envoyLis = lis
	a.envoyGRPC = grpc.NewServer(opts...)
	a.envoy.Register(a.envoyGRPC)
	healthpb.RegisterHealthServer(a.envoyGRPC, a.health)
	return nil
}

// EnvoyAddr is the address of the Envoy port, or "" without one: the
// service is on Addr() as well.
func (a *Allocator) EnvoyAddr() string {
	if a.envoyLis == nil {
		return ""
	}
	return a.envoyLis.Addr().String()
}

// serveEnvoy serves the Envoy port until the allocator stops.
func (a *Allocator) serveEnvoy() {
	if a.envoyGRPC == nil {
		return
	}
	go func() {
		if err := a.envoyGRPC.Serve(a.envoyLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			a.log.Error("envoy rate limit service", "err", err)
		}
	}()
}
