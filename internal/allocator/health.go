package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/store"
)

// probeEvery is how often the store is probed: health follows an outage,
// and its end, within about this long.
const probeEvery = time.Second

// storeHealth probes the store and reports the result through gRPC health
// (SERVING / NOT_SERVING, for the whole server and allot.v1.Allocator) and
// /healthz (200 / 503), and as allot_allocator_store_up (1 / 0). A store
// that cannot probe (the embedded one) is always healthy.
//
// The gauge follows the probe rather than the calls' outcomes: the probe
// costs nothing more, says the same as health, and a failed call may be
// the caller's (a deadline, a key at the cap) rather than the store's.
type storeHealth struct {
	probe   store.Prober // nil: always healthy
	timeout time.Duration
	clk     clock.Clock
	log     *slog.Logger
	grpc    *health.Server
	up      prometheus.Gauge

	mu       sync.Mutex
	err      error // the last probe's failure, nil when healthy
	started  bool  // Serve has begun: statuses may be published
	draining bool
	probing  bool // the loop runs

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newStoreHealth(s store.Store, timeout time.Duration, clk clock.Clock, log *slog.Logger, reg prometheus.Registerer) *storeHealth {
	h := &storeHealth{timeout: timeout, clk: clk, log: log, grpc: health.NewServer(),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "allot_allocator_store_up", Help: "1 while the store answers its probe (once a second, as health does), 0 while it does not.",
		}),
		stop: make(chan struct{}), done: make(chan struct{})}
	reg.MustRegister(h.up)
	h.probe, _ = s.(store.Prober)
	// Until Serve, nothing is served.
	h.grpc.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.grpc.SetServingStatus(allocatorService, healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

const allocatorService = "allot.v1.Allocator"

// check probes the store once and publishes the result; it logs a change
// of state, not every failure.
func (h *storeHealth) check() {
	var err error
	if h.probe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
		err = h.probe.Probe(ctx)
		cancel()
	}
	h.mu.Lock()
	was := h.err
	h.err = err
	h.publishLocked()
	up := 1.0
	if err != nil {
		up = 0
	}
	h.up.Set(up)
	h.mu.Unlock()
	switch {
	case err != nil && was == nil:
		h.log.Error("store unavailable: health is NOT_SERVING until it answers", "err", err)
	case err == nil && was != nil:
		h.log.Info("store available again: health is SERVING")
	}
}

func (h *storeHealth) publishLocked() {
	if !h.started || h.draining {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	h.grpc.SetServingStatus("", st)
	h.grpc.SetServingStatus(allocatorService, st)
}

// serving publishes the current state from now on: Serve has begun.
func (h *storeHealth) serving() {
	h.mu.Lock()
	h.started = true
	h.publishLocked()
	h.mu.Unlock()
}

// loop probes every probeEvery until shutdown. It starts with New, so that
// an allocator's goroutines all exist when New returns.
func (h *storeHealth) loop() {
	h.mu.Lock()
	h.probing = true
	h.mu.Unlock()
	go func() {
		defer close(h.done)
		t := h.clk.NewTimer(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C():
			}
			h.check()
			t.Reset(probeEvery)
		}
	}()
}

// shutdown says NOT_SERVING from now on and stops probing.
func (h *storeHealth) shutdown() {
	h.mu.Lock()
	h.draining = true
	probing := h.probing
	h.mu.Unlock()
	h.grpc.Shutdown()
	h.stopOnce.Do(func() {
		close(h.stop)
		if probing {
			<-h.done
		}
	})
}

// ServeHTTP answers /healthz: 200 "ok", or 503 with the reason.
func (h *storeHealth) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	err, started, draining := h.err, h.started, h.draining
	h.mu.Unlock()
	switch {
	case draining:
		http.Error(w, "draining", http.StatusServiceUnavailable)
	case !started:
		http.Error(w, "starting", http.StatusServiceUnavailable)
	case err != nil:
		http.Error(w, fmt.Sprintf("store unavailable: %v", err), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}
