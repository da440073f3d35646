package slots

import (
	"math"
	"time"

	"github.com/allot-dev/allot/internal/mutate"
)

// Call is one Acquire the loop makes: the requests of up to maxBatch keys,
// sent at once.
type Call struct {
	Requests []Request
	keys     []*Key
	sent     time.Duration // mono
}

// answer takes one call's answers (or its failure) into its keys.
func (m *Manager) answer(c *Call, grants []Grant, err error) {
	if err == nil && len(grants) != len(c.Requests) {
		err = errShortAnswer
	}
	unreachable := err != nil && m.cfg.Unreachable(err)
	if err != nil && !unreachable {
		m.cfg.Logger.Warn("allot: slot lease refused", "err", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Whether the allocator answers is what the newest call sent says: one
	// that timed out after a later one was answered is stale, and puts no
	// key on its fallback while the allocator answers.
	if c.sent >= m.reachSent {
		m.reachSent = c.sent
		m.down.Store(unreachable)
	}
	unreachable = m.down.Load()
	now := m.cfg.Clock.Mono()
	for i, k := range c.keys {
		st := &k.st
		st.asking = false
		if !st.answered {
			st.answered = true
			defer close(st.first) // once its cap is set
		}
		if err != nil {
			m.settle(k, now, allocatorIs(unreachable))
			continue
		}
		g := grants[i]
		st.held, st.ends, st.valid = g.Granted, c.sent+g.TTL, c.sent+g.TTL-st.rule.MaxHold
		if mutate.On(mutate.SlotsPastMaxHold) {
			st.valid = st.ends
		}
		ceil := int64(math.MaxInt64)
		if g.Share < g.Granted {
			ceil = g.Share
		}
		k.ceil.Store(ceil)
		if st.leased(now) {
			// The slots given up while the request was on its way were
			// among those it kept: the grant keeps them for the node, and
			// does not bring them back, or a node above its share would
			// drain only between an answer and its next request.
			k.setCap(g.Granted-(k.givenUp.Load()-st.givenUp), ModeLease)
		} else {
			m.settle(k, now, allocatorAnswers)
		}
	}
}

// Driven by its caller (Config.Stepped), a Manager starts no loop and
// makes no call: Turn is one look of the loop, returning the calls it
// would make, which the caller carries and answers with Answer. The
// deterministic fleet simulator drives it so, on its simulated clock and
// network; nothing else differs.

// Turn looks at every key once, as the loop does each Tick, and returns
// the Acquires to make, and the Releases (with those Forget and Close
// made meanwhile). The caller calls it every Tick of Config.Clock, and
// after Table.Key adds a key (the loop's kick).
func (m *Manager) Turn() (calls []*Call, rets [][]Request) {
	rets, calls = m.look()
	return calls, append(m.TakeReleases(), rets...)
}

// Answer gives a call of Turn its answer: the allocator's grants, or the
// call's error (its timeout's, when no answer came in time).
func (m *Manager) Answer(c *Call, grants []Grant, err error) { m.answer(c, grants, err) }

// TakeReleases returns, driven by its caller, the Releases Forget and
// Close made since it last looked.
func (m *Manager) TakeReleases() [][]Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queued
	m.queued = nil
	return q
}
