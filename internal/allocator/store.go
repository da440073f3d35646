package allocator

// The store the allocator keeps its buckets in: the one given, Redis, or
// the embedded memory store, and the metrics of its key cap.

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/store"
)

func (a *Allocator) openStore() error {
	switch {
	case a.cfg.Store != nil:
		a.store = a.cfg.Store
		return nil
	case a.cfg.RedisURL != "":
		store.RouteRedisLogs(a.log, a.clock)
		s, err := store.DialRedis(a.cfg.RedisURL, store.RedisOptions{Timeout: a.cfg.StoreTimeout, Cluster: a.cfg.RedisCluster,
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
	a.closeRegion()
	if a.ownStore {
		if err := a.store.Close(); err != nil {
			a.log.Warn("closing the store", "err", err)
		}
	}
}
