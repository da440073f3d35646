package httplimit

import (
	"errors"
	"net/http"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/internal/middleware"
)

// A policy on a concurrency rule holds a slot of its key for the handler's
// life: taken before the rate policies are decided, given back when the
// handler returns. A request that finds no slot free is answered 429 with
// a Retry-After from the hold time the node has observed (rounded up to a
// second) and a problem naming the rule.

// splitSlots moves the policies on concurrency rules out of m.policies.
func (m *Middleware) splitSlots() {
	m.policies, m.slotPolicies, m.rules = middleware.SplitSlots(m.c, m.policies, func(p Policy) string { return p.Rule })
}

// takeSlots takes a slot for each slot policy, or answers the request and
// reports false; the caller releases what it returns.
func (m *Middleware) takeSlots(w http.ResponseWriter, r *http.Request) ([]*client.Slot, bool) {
	held, failed, err := middleware.TakeSlots(r.Context(), m.c, m.slotPolicies,
		func(p Policy) string { return p.Rule }, func(p Policy) string { return m.policyKey(r, p, "") })
	if err == nil {
		return held, true
	}
	p := m.slotPolicies[failed]
	var se *client.SlotError
	switch {
	case errors.As(err, &se):
		w.Header().Set("Retry-After", fmtInt(retrySeconds(se.RetryAfter)))
		writeProblem(w, quotaExceeded(p.Rule, se.RetryAfter))
		return nil, false
	case errors.Is(err, client.ErrUnknownRule), errors.Is(err, client.ErrNotConcurrency):
		// The rule went, or changed kind, on a reload: refuse rather
		// than serve without the limit.
		m.errLogs.Do(func() {
			m.opts.Logger.Error("httplimit: request refused: a concurrency policy's rule is not one now", "rule", p.Rule, "err", err)
		})
		writeProblem(w, unknownRule([]string{p.Rule}))
		return nil, false
	case r.Context().Err() != nil:
		return nil, false
	}
	m.errLogs.Do(func() {
		m.opts.Logger.Warn("httplimit: no slot decided", "rule", p.Rule, "err", err)
	})
	// Served without the slots (fail open), unless OnError answered.
	return nil, !m.opts.OnError(w, r, err)
}
