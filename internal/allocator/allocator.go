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
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/certs"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/envoy"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// Config is what an allocator needs. The zero value runs the built-in
// example rules on the embedded store, listening on a free loopback port.
type Config struct {
	// Listen is the gRPC address. default: "127.0.0.1:0" (cmd/allocator
	// passes 127.0.0.1:7070)
	Listen string
	// RulesFile is a YAML rules file, reloaded by Reload. default: none, the
	// built-in example rules
	RulesFile string
	// Rules, when set and RulesFile is empty, is the rule set to serve.
	Rules *rules.Set
	// EnvoyConfigDir is a directory of envoyproxy/ratelimit config files,
	// one domain per *.yaml file as that service reads them, added to the
	// rules' envoy section and reloaded with them. default: none
	EnvoyConfigDir string
	// RedisURL selects the Redis store (redis:// or rediss://). default:
	// none, the embedded memory store
	RedisURL string
	// RedisCluster makes RedisURL name the seed nodes of a Redis Cluster:
	// "redis://h1:p1?addr=h2:p2&addr=h3:p3". default: false
	RedisCluster bool
	// Store, when set, is used instead of RedisURL or memory. The allocator
	// does not close it.
	Store store.Store
	// MetricsListen serves /metrics and /healthz over HTTP. default: none
	MetricsListen string
	// MemoryMaxKeys bounds the keys the embedded memory store holds: past
	// it a call on a new key is refused with ResourceExhausted, while the
	// keys held keep working. default: store.DefaultMemoryMaxKeys
	MemoryMaxKeys int
	// RedisMaxKeys bounds the keys of the Redis database (DBSIZE): at it a
	// call on a new key is refused with ResourceExhausted, while the keys
	// held keep working. Negative: no cap. default: store.DefaultRedisMaxKeys
	RedisMaxKeys int64
	// NewKeysPerNode bounds the keys one node may add to the store per
	// second. Negative: no cap. default: server.DefaultNewKeysPerNode
	NewKeysPerNode float64
	// StoreTimeout bounds each store call. default: 100ms
	StoreTimeout time.Duration
	// Limits bound the input of every call. default: server.DefaultLimits()
	Limits server.Limits
	// GossipBind, when set, joins a memberlist pool as an allocator, so that
	// nodes and other allocators find this one. default: no gossip
	GossipBind string
	// GossipJoin lists pool members to contact at start.
	GossipJoin []string
	// Advertise is the gRPC address nodes should dial, told through gossip.
	// default: the listen address, unless it is unspecified (0.0.0.0)
	Advertise string
	// EnvoyListen, when set, serves Envoy's rate limit service (and health
	// checks) on a gRPC port of its own as well as on Listen. default: Listen only
	EnvoyListen string
	// Logger. default: slog.Default()
	Logger *slog.Logger

	// TLS serves gRPC over TLS, or mTLS with TLS.ClientCAFile.
	// default: plaintext
	TLS TLSConfig
	// MetricsTLS serves /metrics and /healthz over TLS with the gRPC
	// certificate: MetricsTLS, or MetricsMTLS to ask for a client
	// certificate from TLS.ClientCAFile too. default: plaintext
	MetricsTLS string
	// TokenFile holds shared tokens, one a line: every call but health
	// checks must carry one as "authorization: Bearer <token>". Several
	// tokens allow a rotation. Needs TLS. default: no token
	TokenFile string
	// Reflection and GetRules say who may use server reflection and
	// GetRules: AccessAuthenticated, AccessOn or AccessOff. Nodes need
	// GetRules unless they are given Config.Rules. default: AccessAuthenticated
	Reflection, GetRules Access
	// MaxInFlight bounds the Acquire, Release, Check and ShouldRateLimit
	// calls served at once; a call over it is refused with ResourceExhausted at once.
	// Negative: no bound. default: 256
	MaxInFlight int
	// MaxInFlightPerNode bounds one node_id's calls in flight, so that a
	// flooding node cannot take the others' slots. Negative: no bound.
	// default: 32
	MaxInFlightPerNode int
	// GossipKeyringFile holds the gossip keys, base64, one a line, the
	// first one encrypting (see fallback.ReadKeyring). default: gossip in
	// the clear
	GossipKeyringFile string
	// Clock paces the store probe, the certificate poll and log rate
	// limits. default: the real clock
	Clock clock.Clock
}

// Allocator is a running allocator process.
type Allocator struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	ownStore bool
	server   *server.Server
	envoy    *envoy.Service
	metrics  *server.Metrics
	registry *prometheus.Registry
	grpc     *grpc.Server
	health   *health.Server
	lis      net.Listener
	http     *http.Server
	httpLis  net.Listener
	gossip   *fallback.Gossip
	clock    clock.Clock

	envoyGRPC *grpc.Server // nil without Config.EnvoyListen
	envoyLis  net.Listener

	guard      *guard
	certs      *certs.Watcher // nil without TLS
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
	a := &Allocator{cfg: cfg, log: cfg.Logger, registry: prometheus.NewRegistry(), clock: cfg.Clock}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.clock == nil {
		a.clock = clock.Real()
	}
	set, err := a.initialRules()
	if err != nil {
		return nil, err
	}
	if err := a.setupSecurity(); err != nil {
		return nil, err
	}
	if err := a.openStore(); err != nil {
		return nil, err
	}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.registerStoreKeys()
	a.metrics = server.NewMetrics(a.registry)
	a.shed = newShedder(bound(cfg.MaxInFlight, defaultMaxInFlight), bound(cfg.MaxInFlightPerNode, defaultMaxInFlightPerNode), a.registry)
	a.server, err = server.New(server.Config{Store: a.store, Rules: set, StoreTimeout: cfg.StoreTimeout,
		Limits: cfg.Limits, Metrics: a.metrics, Logger: a.log, Clock: a.clock, NewKeysPerNode: cfg.NewKeysPerNode})
	if err != nil {
		a.closeStore()
		return nil, err
	}
	if err := a.setupEnvoy(); err != nil {
		a.closeStore()
		return nil, err
	}
	a.storeOK = newStoreHealth(a.store, a.storeTimeout(), a.clock, a.log, a.registry)
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
	return a, nil
}

// bound reads a MaxInFlight setting: 0 is the default, negative no bound.
func bound(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func (a *Allocator) storeTimeout() time.Duration {
	if a.cfg.StoreTimeout > 0 {
		return a.cfg.StoreTimeout
	}
	return 100 * time.Millisecond
}

// joinGossip advertises this allocator's gRPC address to the pool.
func (a *Allocator) joinGossip() error {
	if a.cfg.GossipBind == "" {
		return nil
	}
	advertise := a.cfg.Advertise
	if advertise == "" {
		host, _, _ := net.SplitHostPort(a.Addr())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			return fmt.Errorf("--gossip with --listen %s: give the address nodes should dial (--advertise)", a.Addr())
		}
		advertise = a.Addr()
	}
	g, err := fallback.Join(fallback.GossipConfig{Name: "allocator-" + advertise, Role: fallback.RoleAllocator,
		Bind: a.cfg.GossipBind, Join: a.cfg.GossipJoin, GRPC: advertise, Keys: a.gossipKeys, Logger: a.log})
	if err != nil {
		return fmt.Errorf("--gossip: %w", err)
	}
	a.gossip = g
	a.log.Info("gossip joined", "addr", g.Addr(), "advertise", advertise)
	return nil
}

func (a *Allocator) leaveGossip() {
	a.leaveOnce.Do(func() {
		if a.gossip != nil {
			if err := a.gossip.Leave(time.Second); err != nil {
				a.log.Warn("leaving gossip", "err", err)
			}
		}
	})
}

// GossipAddr is the address other members join, or "" without gossip.
func (a *Allocator) GossipAddr() string {
	if a.gossip == nil {
		return ""
	}
	return a.gossip.Addr()
}

func (a *Allocator) initialRules() (*rules.Set, error) {
	switch {
	case a.cfg.RulesFile != "" || a.cfg.EnvoyConfigDir != "":
		return a.loadRules()
	case a.cfg.Rules != nil:
		return a.cfg.Rules, nil
	}
	a.log.Info("no rules file given: serving the built-in example rules (see README)")
	return rules.Example(), nil
}

func (a *Allocator) openStore() error {
	switch {
	case a.cfg.Store != nil:
		a.store = a.cfg.Store
		return nil
	case a.cfg.RedisURL != "":
		store.RouteRedisLogs(a.log, a.clock)
		s, err := store.DialRedis(a.cfg.RedisURL, store.RedisOptions{Timeout: a.storeTimeout(), Cluster: a.cfg.RedisCluster,
			MaxKeys: a.cfg.RedisMaxKeys})
		if err != nil {
			return fmt.Errorf("--redis%s: %w", quotedURL(a.cfg.RedisURL), err)
		}
		a.store, a.ownStore = s, true
		a.log.Info("store: redis", "url", redactURL(a.cfg.RedisURL), "cluster", a.cfg.RedisCluster)
		return nil
	}
	mem := store.NewMemoryWith(clock.Real(), store.MemoryOptions{MaxKeys: a.cfg.MemoryMaxKeys})
	a.store, a.ownStore = mem, true
	a.log.Warn("store: embedded memory: state is lost on restart and is not shared; run one allocator, or use --redis for several",
		"max_keys", mem.MaxKeys())
	return nil
}

// registerStoreKeys exports how full the store is, when it has a cap on
// keys: the keys it holds, its cap and the calls it refused at the cap.
func (a *Allocator) registerStoreKeys() {
	kc, ok := a.store.(store.KeyCounter)
	if !ok || kc.MaxKeys() <= 0 {
		return
	}
	a.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_allocator_store_keys", Help: "Keys the store holds: the memory store's, or the Redis database's size (DBSIZE, polled every 100ms).",
		}, func() float64 { return float64(kc.Keys()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_allocator_store_max_keys", Help: "The store's key cap (--memory-max-keys or --redis-max-keys).",
		}, func() float64 { return float64(kc.MaxKeys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_allocator_store_refused_total", Help: "Calls on a new key the store refused at its key cap.",
		}, func() float64 { return float64(kc.Refused()) }),
	)
}

func (a *Allocator) closeStore() {
	if a.ownStore {
		if err := a.store.Close(); err != nil {
			a.log.Warn("closing the store", "err", err)
		}
	}
}

func (a *Allocator) listen() error {
	addr := a.cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
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

// Reload re-reads the rules file and the envoy config directory. An
// invalid file keeps the current rules; the error says why.
func (a *Allocator) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.cfg.RulesFile == "" && a.cfg.EnvoyConfigDir == "" {
		return errors.New("no rules file to reload (started without --config)")
	}
	set, err := a.loadRules()
	a.metrics.ObserveReload(err)
	if err != nil {
		a.log.Error("rules reload failed; keeping the current rules", "err", err, "rules_version", a.server.Rules().Version())
		return err
	}
	old := a.server.Rules().Version()
	a.server.SetRules(set)
	a.envoy.RulesLoaded(set)
	domains, limits := envoySize(set)
	a.log.Info("rules reloaded", "rules", set.Len(), "envoy_domains", domains, "envoy_limits", limits,
		"rules_version", set.Version(), "previous_version", old)
	return nil
}

// envoySize counts what the rules' envoy section holds, for the logs: its
// domains and its limits (descriptors with a rate_limit). rules= counts the
// rules section alone, so a file with only an envoy section says rules=0;
// the counts are logged as envoy_domains and envoy_limits, apart from
// envoy=, the Envoy listener's address.
func envoySize(set *rules.Set) (domains, limits int) {
	env := set.Envoy()
	if env == nil {
		return 0, 0
	}
	for _, name := range env.Domains() {
		dom, _ := env.Domain(name)
		domains++
		limits += len(dom.Limits())
	}
	return domains, limits
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
