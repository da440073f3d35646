package upstream

// Ejection: an allocator that fails calls as a sick one does leaves the
// round, and health probes with backoff bring it back (conns.go
// routes the calls around it).

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// probeBackoff spaces the health probes of an ejected allocator: soon at
// first, since most ejections are short (a restart, a pause), then every
// few seconds, which is how late a node may notice that one is back. It
// costs one health check per probe, and the other allocators serve
// meanwhile.
var probeBackoff = backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 2, Jitter: 0.2, MaxDelay: 2 * time.Second}

// relapseWithin: an allocator ejected again this soon after its return is
// not well (it answers health probes, not calls): its probes resume where
// they stopped, and wait longer each time, instead of bringing it back
// within 250ms to fail the next call again.
const relapseWithin = 30 * time.Second

// healthService is the name the allocators report their health under:
// NOT_SERVING while their store is down or they are draining.
var healthService = allotv1.Allocator_ServiceDesc.ServiceName

// eject takes a out of the round until a probe finds it answering, unless
// it is the last allocator in the round: ejecting that one would only give
// its time to allocators already found sick, when it is the likeliest to
// answer (a slow moment, not a dead allocator). So a lone allocator is
// never ejected, and when all fail, all but one are.
func (p *Conns) eject(a *endpoint, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || a.ctx.Err() != nil || a.sick.Load() || !p.othersHealthyLocked(a) {
		return
	}
	a.sick.Store(true)
	p.publishLocked(a)
	if a.wait == 0 || p.clk.Now().Sub(a.back) > relapseWithin {
		a.wait = probeBackoff.BaseDelay
	} else {
		p.backOffLocked(a)
	}
	if p.ejections != nil {
		p.ejections.WithLabelValues(a.addr).Inc()
	}
	p.log.LogKeyed("ejected "+a.addr, slog.LevelWarn,
		"allot: allocator ejected: calls go to the other allocators until it answers a health probe",
		"allocator", a.addr, "err", cause)
	if !a.probing {
		a.probing = true
		p.probes.Add(1)
		go p.probe(a)
	}
}

func (p *Conns) othersHealthyLocked(a *endpoint) bool {
	for _, b := range *p.list.Load() {
		if b != a && !b.sick.Load() {
			return true
		}
	}
	return false
}

// restore puts a back in the round, if it was out.
func (p *Conns) restore(a *endpoint, why string) {
	if !a.sick.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.restoreLocked(a, why)
}

func (p *Conns) restoreLocked(a *endpoint, why string) {
	if !a.sick.Swap(false) {
		return
	}
	a.back = p.clk.Now()
	p.publishLocked(a)
	p.log.LogKeyed("restored "+a.addr, slog.LevelInfo, "allot: allocator restored: "+why, "allocator", a.addr)
}

// probe asks an ejected allocator for its health, with backoff, until it
// answers SERVING, it is restored by a call, or it leaves the list.
func (p *Conns) probe(a *endpoint) {
	defer p.probes.Done()
	health := healthpb.NewHealthClient(a.conn)
	for {
		p.mu.Lock()
		wait := a.wait
		p.mu.Unlock()
		t := p.clk.NewTimer(time.Duration(float64(wait) * (1 + probeBackoff.Jitter*(2*rand.Float64()-1))))
		select {
		case <-a.ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if !p.stillSick(a) {
			return
		}
		up := p.serving(a, health)
		p.mu.Lock()
		if up {
			a.probing = false
			p.restoreLocked(a, "it answered a health probe")
			p.mu.Unlock()
			return
		}
		p.backOffLocked(a)
		p.mu.Unlock()
	}
}

func (p *Conns) backOffLocked(a *endpoint) {
	a.wait = min(time.Duration(float64(a.wait)*probeBackoff.Multiplier), probeBackoff.MaxDelay)
}

// serving is one health probe: whether a answers SERVING (or answers at
// all, without the health service) within a lease call's deadline.
func (p *Conns) serving(a *endpoint, health healthpb.HealthClient) bool {
	ctx, cancel := context.WithTimeout(a.ctx, p.timeout())
	defer cancel()
	// Waiting for ready: a connection coming back within the deadline is
	// given the chance to answer.
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: healthService}, grpc.WaitForReady(true))
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING || status.Code(err) == codes.Unimplemented
}

// stillSick reports whether a is still ejected; when not, its probe loop
// ends.
func (p *Conns) stillSick(a *endpoint) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !a.sick.Load() {
		a.probing = false
		return false
	}
	return true
}
