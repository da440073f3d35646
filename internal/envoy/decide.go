package envoy

import (
	"context"
	"slices"
	"time"

	"github.com/allot-dev/allot/internal/store"
)

// decide decides every limited descriptor of a request through the store,
// spending from all of them or from none ("10 per second AND 1,000 per
// hour": a request one limit refuses costs nothing on the others).
//
// The store decides one (rule, key) atomically and has no call that spends
// from several at once, so a request with several limits is decided in
// two phases:
//
//  1. peek: a Check of cost 0 on each limit (it spends nothing, and says
//     what is left). If any enforced limit lacks the request's hits, the
//     request is refused and nothing is spent.
//  2. spend: a Check of the request's hits on each limit, tightest first
//     (least room left after the request).
//
// The compromise: between the two phases a concurrent request may take
// what the peek saw. Then a spend is refused; the request is refused, and
// the limits already spent in phase 2 stay charged for it. Spending the
// tightest limit first makes that rare (the limit likeliest to run out is
// spent before any other), and it never admits a request over a limit:
// every spend is itself atomic. allot_envoy_partial_charges_total counts
// the requests it happens to. A request with one limit is one atomic
// Check, with no compromise at all.
//
// Shadow limits are decided and counted like the others but never refuse:
// one that would refuse is left unspent and does not block the rest.
// Quota limits (quota_mode) are soft the same way, but for one case: when
// every quota limit of the request is exceeded the request is refused
// (quotaExhausted), before anything is spent.
//
// A limit of 0, and hits above a limit's capacity, refuse without a store
// call (the store has nothing to say that could change the answer); their
// reset is the end of the limit's window on the service's clock, as
// envoyproxy/ratelimit gives it for every limit (untilWindowEnd).
func (s *Service) decide(ctx context.Context, checks []check) error {
	var live []*check // limits the store decides
	refused := false  // an enforced limit refuses without asking the store
	now := s.clock.Now()
	for i := range checks {
		c := &checks[i]
		l := c.limit
		switch {
		case l == nil || l.Unlimited:
			continue
		case l.Rule == nil: // requests_per_unit: 0
			c.over, c.never = c.hits > 0, c.hits > 0
			c.d = store.Decision{ResetAfter: untilWindowEnd(now, l.Period())}
		case c.hits > uint64(l.Rule.Capacity()): // can never pass
			c.over, c.never = true, true
			c.d = store.Decision{Limit: l.Rule.Limit, ResetAfter: untilWindowEnd(now, l.Period())}
		default:
			live = append(live, c)
			continue
		}
		refused = refused || (c.over && !l.Soft())
	}
	refused = refused || quotaExhausted(checks)
	if len(live) == 0 {
		return nil
	}
	if len(live) == 1 && !refused {
		c := live[0]
		d, err := s.timed(ctx, "envoy_check", c.limit.Rule, c.key, int64(c.hits))
		c.d, c.over = d, !d.Allowed
		return err
	}
	for _, c := range live {
		d, err := s.timed(ctx, "envoy_peek", c.limit.Rule, c.key, 0)
		if err != nil {
			return err
		}
		c.d, c.over = d, d.Remaining < int64(c.hits)
		refused = refused || (c.over && !c.limit.Soft())
	}
	if refused || quotaExhausted(checks) {
		return nil
	}
	return s.spend(ctx, live)
}

// spend charges every limit that the peek found room in, tightest first,
// and stops at the first enforced refusal (a race lost to another
// request).
func (s *Service) spend(ctx context.Context, live []*check) error {
	order := make([]*check, 0, len(live))
	for _, c := range live {
		if !c.over { // a soft limit without room stays unspent
			order = append(order, c)
		}
	}
	slices.SortStableFunc(order, func(a, b *check) int {
		ra, rb := a.d.Remaining-int64(a.hits), b.d.Remaining-int64(b.hits)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	spent := 0
	for _, c := range order {
		d, err := s.timed(ctx, "envoy_check", c.limit.Rule, c.key, int64(c.hits))
		if err != nil {
			return err
		}
		c.d, c.over = d, !d.Allowed
		if !c.over {
			spent++
			continue
		}
		if c.limit.Soft() {
			continue
		}
		if spent > 0 {
			s.metrics.partial.Inc()
		}
		return nil
	}
	return nil
}

// untilWindowEnd is the time from now to the end of the window of period
// that now falls in, windows aligned to the Unix epoch: when a fixed
// window's count starts afresh, and the reset envoyproxy/ratelimit reports
// for any limit (whole seconds once respond rounds it up). It is never 0: at
// a window's first instant the whole window is ahead.
func untilWindowEnd(now time.Time, period time.Duration) time.Duration {
	p := period.Nanoseconds()
	if p <= 0 {
		return 0
	}
	into := now.UnixNano() % p
	if into < 0 { // before 1970
		into += p
	}
	return time.Duration(p - into)
}
