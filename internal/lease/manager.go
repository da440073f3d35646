package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Manager runs a node's Core in one goroutine, with the clock's timers, and
// the calls it asks for beside it: their answers come back over a channel
// and are applied in the loop. Its methods are safe for concurrent use.
type Manager struct {
	*Core
	cfg     Config
	clk     clock.Clock
	results chan answered
	stop    chan struct{}
	done    chan struct{}
	rpcs    sync.WaitGroup
	// calls counts Releases in flight and Acquires whose answer is not yet
	// applied: a test that waits for them sees their effect.
	calls   atomic.Int32
	sync    chan chan struct{} // tests wait for the loop to catch up
	closing sync.Once
}

type answered struct {
	call *Call
	ans  Answer
	err  error
	took time.Duration
}

// NewManager starts the lease loop; Close stops it.
func NewManager(cfg Config) *Manager {
	cfg.fill()
	m := &Manager{
		Core:    NewCore(cfg, cfg.Clock.Mono()),
		cfg:     cfg,
		clk:     cfg.Clock,
		results: make(chan answered, 64),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		sync:    make(chan chan struct{}),
	}
	go m.loop()
	return m
}

// Table returns the table of r's name, giving it r as its current rule.
func (m *Manager) Table(r *rules.Rule) *Table { return m.Core.Table(r) }

func (m *Manager) loop() {
	defer close(m.done)
	timer := m.clk.NewTimer(m.cfg.Sweep)
	defer timer.Stop()
	for {
		var synced chan struct{}
		select {
		case <-m.Wake():
		case r := <-m.results:
			m.apply(r)
		case <-timer.C():
		case synced = <-m.sync:
			// A test waits for the loop: do what a fired timer asks first.
			select {
			case <-timer.C():
			default:
			}
		case <-m.stop:
			return
		}
		now := m.clk.Mono()
		m.Turn(now)
		// A waiting test is told only once nothing is due at now: a turn
		// can leave work for this same instant (a key it scheduled now).
		for i := 0; synced != nil && i < 4; i++ {
			if wake, ok := m.NextWake(); !ok || wake > now {
				break
			}
			m.Turn(now)
		}
		m.dispatch()
		timer.Stop()
		if wake, ok := m.NextWake(); ok {
			timer.Reset(max(wake-now, 0))
		}
		if synced != nil {
			close(synced)
		}
	}
}

// apply brings one call's answer into the Core.
func (m *Manager) apply(r answered) {
	defer m.calls.Add(-1)
	m.Answer(r.call, r.ans, r.err, r.took, m.clk.Mono())
}

// dispatch sends the calls the Core asked for, each in a goroutine.
func (m *Manager) dispatch() {
	calls, rels := m.TakeCalls()
	for _, call := range calls {
		m.rpcs.Add(1)
		m.calls.Add(1)
		go func() {
			defer m.rpcs.Done()
			ctx, cancel := context.WithTimeout(context.Background(), call.Timeout)
			defer cancel()
			start := m.clk.Mono()
			ans, err := m.cfg.Transport.Acquire(ctx, call.Requests)
			took := m.clk.Mono() - start
			if h := m.cfg.Hooks.Acquired; h != nil {
				var wanted, granted int64
				for i, r := range call.Requests {
					wanted += r.Want
					if err == nil && i < len(ans.Grants) {
						granted += ans.Grants[i].Granted
					}
				}
				h(len(call.Requests), wanted, granted, took, err)
			}
			// Delivered even after Close began: Close applies what calls in
			// flight bring, so that their grants are returned too.
			m.results <- answered{call: call, ans: ans, err: err, took: took}
		}()
	}
	for _, rets := range rels {
		m.rpcs.Add(1)
		m.calls.Add(1)
		go func() {
			defer m.rpcs.Done()
			defer m.calls.Add(-1)
			m.release(context.Background(), rets)
		}()
	}
}

// Sync waits for the loop to do what is due now (tests).
func (m *Manager) Sync() {
	done := make(chan struct{})
	select {
	case m.sync <- done:
		<-done
	case <-m.done:
	}
}

// Idle reports whether nothing is in flight: no call out, no answer
// unapplied, nothing in the inbox (tests).
func (m *Manager) Idle() bool { return m.calls.Load() == 0 && !m.Busy() }

// Close stops the loop, waits for calls in flight, reports consumption and
// returns every leased token, within ctx.
func (m *Manager) Close(ctx context.Context) error {
	first := false
	m.closing.Do(func() { first = true })
	if !first {
		return nil
	}
	close(m.stop)
	<-m.done
	waited := make(chan struct{})
	go func() { m.rpcs.Wait(); close(waited) }()
	for {
		select {
		case r := <-m.results:
			m.apply(r)
			continue
		case <-waited:
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	for len(m.results) > 0 {
		m.apply(<-m.results)
	}
	fin := m.Core.Close(m.clk.Mono())
	firstErr := m.report(ctx, fin.Retries) // a key appears once per call: retries go first
	if err := m.report(ctx, fin.Reports); err != nil && firstErr == nil {
		firstErr = err
	}
	if err := m.release(ctx, fin.Returns); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

func (m *Manager) release(ctx context.Context, rets []Return) error {
	var firstErr error
	for len(rets) > 0 {
		n := min(len(rets), m.cfg.MaxBatch)
		// Each call gets the usual short deadline: an unreachable allocator
		// must not hold a node's shutdown for the whole of ctx.
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		err := m.cfg.Transport.Release(cctx, rets[:n])
		cancel()
		if h := m.cfg.Hooks.Released; h != nil {
			var tokens int64
			for _, r := range rets[:n] {
				tokens += r.Tokens
			}
			h(n, tokens, err)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		rets = rets[n:]
	}
	return firstErr
}

// report sends consumption reports, MaxBatch at a time.
func (m *Manager) report(ctx context.Context, reports []Request) error {
	var firstErr error
	for len(reports) > 0 {
		n := min(len(reports), m.cfg.MaxBatch)
		cctx, cancel := context.WithTimeout(ctx, m.cfg.RPCTimeout)
		if _, err := m.cfg.Transport.Acquire(cctx, reports[:n]); err != nil && firstErr == nil {
			firstErr = err
		}
		cancel()
		reports = reports[n:]
	}
	return firstErr
}
