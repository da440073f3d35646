// Package allocator wires the allocator process: listeners, gRPC services,
// the store, rules reloads, metrics and graceful shutdown. cmd/allocator is
// its command line; tests and the bench run it in-process.
package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/allot-dev/allot/internal/certs"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/envoy"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/region"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// Allocator is a running allocator process.
type Allocator struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	ownStore bool
	// lending is what the services lend from: the store, or the region in
	// front of it (region.go).
	lending    store.Store
	region     *region.Store // nil without Config.Parent
	warnGlobal sync.Once
	server     *server.Server
	envoy      *envoy.Service
	metrics    *server.Metrics
	registry   *prometheus.Registry
	grpc       *grpc.Server
	health     *health.Server
	lis        net.Listener
	http       *http.Server
	httpLis    net.Listener
	gossip     *fallback.Gossip
	clock      clock.Clock

	// How the region reaches its parent; nil without Config.ParentTLS
	// (region.go).
	parentCerts *certs.Watcher
	parentToken *parentToken

	envoyGRPC *grpc.Server // nil without Config.EnvoyListen
	envoyLis  net.Listener

	guard      *guard
	admin      *adminGuard
	overlay    *server.Overlay // the file's rules with the runtime overrides
	certs      *certs.Watcher  // nil without TLS
	gossipKeys [][]byte
	shed       *shedder
	storeOK    *storeHealth

	reloadMu  sync.Mutex
	stopOnce  sync.Once
	leaveOnce sync.Once
}

// New builds an allocator, binds its listeners and starts its background
// loops (the store probe, the certificate poll); Serve starts serving, and
// Stop or Shutdown ends it all.
func New(cfg Config) (*Allocator, error) {
	cfg.fill()
	if err := cfg.checkRegion(); err != nil {
		return nil, err
	}
	a := &Allocator{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry(), clock: cfg.Clock}
	set, err := a.initialRules()
	if err != nil {
		return nil, err
	}
	if err := a.setupSecurity(); err != nil {
		return nil, err
	}
	if err := a.setupAdmin(); err != nil {
		return nil, err
	}
	if err := a.openStore(); err != nil {
		return nil, err
	}
	if err := a.openRegion(set); err != nil {
		a.closeStore()
		return nil, err
	}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.registerStoreKeys()
	a.metrics = server.NewMetrics(a.registry)
	a.shed = newShedder(bound(cfg.MaxInFlight), bound(cfg.MaxInFlightPerNode), a.registry)
	a.server, err = server.New(server.Config{Store: a.lending, Rules: set, StoreTimeout: cfg.StoreTimeout,
		Limits: cfg.Limits, Metrics: a.metrics, Logger: a.log, Clock: a.clock, NewKeysPerNode: cfg.NewKeysPerNode})
	if err != nil {
		a.closeStore()
		return nil, err
	}
	a.startOverrides()
	if err := a.setupEnvoy(); err != nil {
		a.closeStore()
		return nil, err
	}
	a.storeOK = newStoreHealth(a.store, a.cfg.StoreTimeout, a.clock, a.log, a.registry)
	a.storeOK.check() // the first state, logged if the store is down
	if err := a.listen(); err != nil {
		a.closeStore()
		return nil, err
	}
	if err := a.joinGossip(); err != nil {
		a.lis.Close()
		if a.httpLis != nil {
			a.httpLis.Close()
		}
		if a.envoyLis != nil {
			a.envoyLis.Close()
		}
		a.closeStore()
		return nil, err
	}
	// The loops start last, once nothing can fail; Stop ends them.
	a.storeOK.loop()
	a.pollCerts()
	a.pollParentCerts()
	a.overlay.Run(a.cfg.OverridesPoll)
	return a, nil
}

// Registry holds the allocator's metrics.
func (a *Allocator) Registry() *prometheus.Registry { return a.registry }

// Rules is the rule set being served.
func (a *Allocator) Rules() *rules.Set { return a.server.Rules() }

// Serve serves until Shutdown or Stop, and returns nil then.
func (a *Allocator) Serve() error {
	if a.http != nil {
		go func() {
			if err := a.http.Serve(a.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("metrics server", "err", err)
			}
		}()
	}
	a.serveEnvoy()
	a.storeOK.serving()
	set := a.server.Rules()
	domains, limits := envoySize(set)
	a.log.Info("allocator serving", "tls", a.certs != nil, "mtls", a.cfg.TLS.ClientCAFile != "", "grpc", a.Addr(), "metrics", a.MetricsAddr(),
		"rules", set.Len(), "envoy_domains", domains, "envoy_limits", limits, "rules_version", set.Version(), "envoy", a.EnvoyAddr())
	err := a.grpc.Serve(a.lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops taking calls, lets calls in flight finish until ctx ends,
// then stops hard and closes the store.
func (a *Allocator) Shutdown(ctx context.Context) error {
	a.storeOK.shutdown() // health checks now answer NOT_SERVING
	a.leaveGossip()      // nodes stop finding this allocator while it drains
	done := make(chan struct{})
	go func() {
		if a.envoyGRPC != nil {
			a.envoyGRPC.GracefulStop()
		}
		a.grpc.GracefulStop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("drain deadline passed with calls in flight: %w", ctx.Err())
		if a.envoyGRPC != nil {
			a.envoyGRPC.Stop()
		}
		a.grpc.Stop()
		<-done
	}
	a.finish()
	return err
}

// Stop stops at once, dropping calls in flight: what a crash looks like to
// the nodes, without exiting the process.
func (a *Allocator) Stop() {
	if a.envoyGRPC != nil {
		a.envoyGRPC.Stop()
	}
	a.grpc.Stop()
	a.finish()
}

func (a *Allocator) finish() {
	a.stopOnce.Do(func() {
		a.storeOK.shutdown()
		a.overlay.Stop()
		if a.certs != nil {
			a.certs.Stop()
		}
		a.leaveGossip()
		if a.http != nil {
			a.http.Close()
		}
		a.closeStore()
	})
}
