package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/allot-dev/allot/client"
)

// Settling: a request admitted on its estimate (Options.Cost) is charged,
// once its handler returns, what the handler says it cost (an LLM proxy's
// tokens used, a query's rows), through client.Reservation.Settle: more
// than the estimate takes the rest, into the key's debt up to the rule's
// max_debt, and the key refuses until refill repays it; less gives the
// rest back. A handler that reports nothing, or a cost that does not
// parse, is charged its estimate. A cost of 0 from Options.Cost exempts
// the request, as it does without settling: it is neither decided nor
// settled.

// costKey is the context key of a request's cost slot.
type costKey struct{}

// costSlot is where ReportCost puts a request's cost; -1: not reported.
type costSlot struct{ n atomic.Int64 }

// ReportCost says what the request whose context is ctx cost, for a
// middleware with Options.SettleCallback; the last report wins. It
// reports false when ctx is not such a request's, or n is negative.
func ReportCost(ctx context.Context, n int64) bool {
	s, ok := ctx.Value(costKey{}).(*costSlot)
	if !ok || n < 0 {
		return false
	}
	s.n.Store(n)
	return true
}

// serveSettled serves an admitted request and settles it when its handler
// returns, also when the handler panics (at its estimate, then).
func (m *Middleware) serveSettled(w http.ResponseWriter, r *http.Request, res *client.Reservation, next http.Handler) {
	slot := &costSlot{}
	slot.n.Store(-1)
	if m.opts.SettleCallback {
		r = r.WithContext(context.WithValue(r.Context(), costKey{}, slot))
	}
	defer func() {
		actual, ok := m.reported(w, slot)
		if !ok {
			_ = res.Settle(res.Reserved())
			return
		}
		if err := res.Settle(actual); err != nil {
			m.errLogs.Do(func() {
				m.opts.Logger.Warn("httplimit: request settled in part", "rules", m.rules, "err", err)
			})
		}
	}()
	next.ServeHTTP(w, r)
}

// reported is the cost the handler reported: by ReportCost, else in the
// settle header or trailer.
func (m *Middleware) reported(w http.ResponseWriter, slot *costSlot) (int64, bool) {
	if n := slot.n.Load(); n >= 0 {
		return n, true
	}
	if m.opts.SettleHeader == "" {
		return 0, false
	}
	h := w.Header()
	v := h.Get(m.opts.SettleHeader)
	if v == "" {
		v = h.Get(http.TrailerPrefix + m.opts.SettleHeader)
	}
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		m.errLogs.Do(func() {
			m.opts.Logger.Warn("httplimit: a settle header that is not a count of tokens; charged the estimate",
				"header", m.opts.SettleHeader, "value", v)
		})
		return 0, false
	}
	return n, true
}
