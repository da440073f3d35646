package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
)

// Mode says which part of Allot made a decision.
type Mode uint8

const (
	// ModeLease: decided locally from tokens the allocator lent this node.
	ModeLease Mode = iota + 1
	// ModeFallback: decided locally from the node's share, limit/N, because
	// the key had no lease yet or the allocator could not be reached.
	ModeFallback
	// ModeStrict: decided by the allocator for this one request.
	ModeStrict
)

func (m Mode) String() string {
	switch m {
	case ModeLease:
		return "lease"
	case ModeFallback:
		return "fallback"
	case ModeStrict:
		return "strict"
	}
	return "unknown"
}

// Decision is what a caller needs to answer its own client.
type Decision struct {
	Allowed bool
	// Limit is the rule's limit per period.
	Limit int64
	// Remaining is what this node can still admit without asking: the
	// tokens of its lease, its fallback share, or the allocator's count for
	// a strict rule.
	Remaining int64
	// RetryAfter is, when refused, how long until asking again may pass;
	// the value of an HTTP Retry-After.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is whole again, where known.
	ResetAfter time.Duration
	// Mode is the part of Allot that decided.
	Mode Mode
	// Rule names the rule the decision is about: for AllowAll, the rule
	// that refused, or the one with the least remaining.
	Rule string
	// Shadow says that a shadow rule would have refused this request and
	// let it pass: Allowed is true, and the rest of the decision is the
	// refusal's. Shadow rules are how a new rule is rolled out.
	Shadow bool
}

// Allow reports whether one request for key under rule may proceed. An
// error (an unknown rule, a bad key, a closed client) is a refusal; use
// AllowN to see it.
func (c *Client) Allow(ctx context.Context, rule, key string) bool {
	// The common case first, with nothing to build: a leased key with tokens.
	// No key check: a pool exists only for a key that passed it.
	if rs := c.rules.Load().byName[rule]; rs != nil && rs.table != nil {
		if p := rs.table.Lookup(key); p != nil {
			if _, ok := p.Take(1); ok {
				return true
			}
		}
	}
	d, err := c.AllowN(ctx, rule, key, 1)
	return err == nil && d.Allowed
}

// AllowN decides a request that costs n tokens. On a key that holds leased
// tokens it is an in-memory step: no network, no clock, no allocation.
func (c *Client) AllowN(ctx context.Context, rule, key string, n int64) (Decision, error) {
	d, _, err := c.decide(ctx, c.rules.Load().byName[rule], rule, key, n)
	return d, err
}

// decide decides a request on rs, the state of rule (nil if unknown), and
// says where its tokens came from. A shadow rule's refusal is let through.
func (c *Client) decide(ctx context.Context, rs *ruleState, rule, key string, n int64) (Decision, spend, error) {
	if err := c.check(rs, rule, key, n); err != nil {
		return Decision{}, spend{}, err
	}
	var d Decision
	var sp spend
	var err error
	if rs.table == nil {
		d, err = c.decideStrict(ctx, rs, key, n, key)
	} else {
		d, sp, err = c.take(ctx, rs, key, n, true)
	}
	return shadow(rs, d), sp, err
}

// shadow lets a shadow rule's refusal through, marked.
func shadow(rs *ruleState, d Decision) Decision {
	if !d.Allowed && rs.rule.Shadow && d.Rule != "" {
		d.Allowed, d.Shadow = true, true
	}
	return d
}

// state finds the rule and checks the request's shape.
func (c *Client) state(rule, key string, n int64) (*ruleState, error) {
	rs := c.rules.Load().byName[rule]
	return rs, c.check(rs, rule, key, n)
}

// check checks a request on rs, the state of rule (nil if unknown).
func (c *Client) check(rs *ruleState, rule, key string, n int64) error {
	var err error
	switch {
	case c.closed.Load():
		err = ErrClosed
	case rs == nil:
		err = c.unknownRule(rule)
	case !validKey(key):
		err = ErrInvalidKey
	case n <= 0:
		err = ErrInvalidCost
	case n > rs.rule.ForKey(key).Capacity():
		err = fmt.Errorf("%w: cost %d, capacity %d of rule %q for this key", ErrCostAboveCapacity, n, rs.rule.ForKey(key).Capacity(), rule)
	}
	return err
}

func (c *Client) unknownRule(rule string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.requestRules()
	return fmt.Errorf("%w %q", ErrUnknownRule, rule)
}

// spend records where a decision took its tokens from, so that a
// multi-rule check can give them back.
type spend struct {
	pool  *lease.Pool
	gen   uint64 // the pool's lease generation when the tokens were taken
	share *fallback.Share
	n     int64
}

// undo gives the tokens back and reports how many went back: none when
// their lease has ended since, or when the allocator decided (strict).
func (s spend) undo() int64 {
	switch {
	case s.share != nil:
		s.share.Refund(s.n)
		s.pool.Unconsume(s.n)
		return s.n
	case s.pool != nil && s.pool.Give(s.n, s.gen):
		return s.n
	}
	return 0
}

// take decides a leasable rule: lease tokens first, else what the key may
// do without them. central says a failure: closed rule may ask the
// allocator about a key it is not serving yet; AllowAll, which must be able
// to give back what it took, says no and such a key is refused.
func (c *Client) take(ctx context.Context, rs *ruleState, key string, n int64, central bool) (Decision, spend, error) {
	for {
		p := rs.table.Pool(key)
		if p == nil { // a new key, and the node's key table is full
			if !central {
				r := rs.rule.ForKey(key)
				rs.counts.decide(false, ModeStrict)
				return Decision{Limit: r.Limit, RetryAfter: r.Lease.Refresh, Mode: ModeStrict, Rule: r.Name}, spend{}, nil
			}
			d, err := c.decideStrict(ctx, rs, key, n, overCapShare)
			return d, spend{}, err
		}
		gen := p.Generation()
		left, ok := p.Take(n)
		if ok {
			return Decision{Allowed: true, Limit: p.Rule().Limit, Remaining: left, Mode: ModeLease, Rule: rs.rule.Name},
				spend{pool: p, gen: gen, n: n}, nil
		}
		if left >= 0 {
			d, sp, err := c.withoutLease(ctx, rs, p, key, n, central)
			if err == errDecideAgain {
				continue
			}
			return d, sp, err
		}
		// The pool was evicted under us; the table now has a fresh one.
	}
}

// withoutLease decides when the pool is empty. A key the allocator is
// serving waits for its next lease. A key it is not serving (new, or the
// allocator unreachable) uses the node's fallback share, reported later as
// consumed — except under a failure: closed rule, which never admits
// without the allocator: it asks it for this request (Check) while the
// first lease is on its way, and denies when it is down.
func (c *Client) withoutLease(ctx context.Context, rs *ruleState, p *lease.Pool, key string, n int64, central bool) (Decision, spend, error) {
	r := p.Rule()
	now := c.cfg.Clock.Now()
	down := c.mgr.Down()
	// A served key waits for its next lease; so does a key whose share of
	// the rate still runs while the allocator is down: that share is its
	// limit until the lease ends, and only then does the fallback take over.
	if c.closed.Load() || leaseDecides(p, down) {
		p.Refused(n)
		rs.counts.decide(false, ModeLease)
		return Decision{Limit: r.Limit, RetryAfter: leaseRetry(p, r, n), Mode: ModeLease, Rule: r.Name}, spend{}, nil
	}
	if r.Failure == rules.FailClosed {
		p.Refused(n) // demand for the rate estimate; it also asks for the first lease
		if !down && central {
			d, err := c.decideStrict(ctx, rs, key, n, key)
			return d, spend{}, err
		}
		rs.counts.decide(false, ModeFallback)
		return Decision{Limit: r.Limit, RetryAfter: r.Lease.Refresh, Mode: ModeFallback, Rule: r.Name}, spend{}, nil
	}
	share := p.Fallback()
	if leaseDecides(p, c.mgr.Down()) {
		// A grant came since this request found the pool empty, and let
		// the key's share go: decide again, on what it brought. A share
		// made after the grant, full, would admit the requests caught in
		// that instant a burst of their own.
		p.DropFallback(share, now)
		return Decision{}, spend{}, errDecideAgain
	}
	nodes := c.nodesFor(p.Holders())
	if left, ok := p.LeftCentrally(); ok {
		share.Cap(r, nodes, now, left/int64(nodes))
	}
	bd := share.AllowN(r, nodes, now, n)
	if bd.Allowed {
		p.Consumed(n)
	} else {
		if central && !down && !fallback.Admits(r, nodes) {
			if d, sp, ok := c.awaitFirstLease(ctx, rs, p, n); ok {
				return d, sp, nil
			}
		}
		p.Refused(n)
	}
	rs.counts.decide(bd.Allowed, ModeFallback)
	d := Decision{Allowed: bd.Allowed, Limit: r.Limit, Remaining: bd.Remaining,
		RetryAfter: bd.RetryAfter, ResetAfter: bd.ResetAfter, Mode: ModeFallback, Rule: r.Name}
	if !bd.Allowed {
		return d, spend{}, nil
	}
	return d, spend{pool: p, share: share, n: n}, nil
}

// leaseDecides reports whether the key's lease decides, not its fallback
// share: the allocator serves it, and is reachable or gave it a share of
// the rate that runs until the lease ends.
func leaseDecides(p *lease.Pool, down bool) bool { return p.Served() && (!down || p.Sharing()) }

// awaitFirstLease waits, at most Lease.FirstLeaseWait and within ctx, for
// the first answer on a key whose fallback share can admit nothing (a burst
// smaller than the fleet rounds to nothing per node), and takes from the
// lease if one came: a refusal is certain, a lease one round trip away is
// not. A share that is merely spent does not wait: it refills at limit/N
// while the lease is on its way. It reports false when no lease tokens
// came.
func (c *Client) awaitFirstLease(ctx context.Context, rs *ruleState, p *lease.Pool, n int64) (Decision, spend, bool) {
	wait := c.cfg.Lease.FirstLeaseWait
	if wait <= 0 {
		return Decision{}, spend{}, false
	}
	timer := c.cfg.Clock.NewTimer(wait)
	defer timer.Stop()
	for !p.Served() && !c.mgr.Down() {
		select {
		case <-c.mgr.Answered():
		case <-timer.C():
			return Decision{}, spend{}, false
		case <-ctx.Done():
			return Decision{}, spend{}, false
		}
	}
	gen := p.Generation()
	left, ok := p.Take(n)
	if !ok {
		return Decision{}, spend{}, false
	}
	// Counted with the lease's other admissions, by the sweep.
	return Decision{Allowed: true, Limit: p.Rule().Limit, Remaining: left, Mode: ModeLease, Rule: rs.rule.Name},
		spend{pool: p, gen: gen, n: n}, true
}

// leaseRetry estimates when a starved key may pass: not before its next
// refill, and not before the rule could have made n tokens.
func leaseRetry(p *lease.Pool, r *rules.Rule, n int64) time.Duration {
	made := time.Duration(min(float64(n)/r.Rate()*float64(time.Second), math.MaxInt64/2))
	return max(p.RetryIn(), made, time.Millisecond)
}

// errDecideAgain tells take that a grant came while withoutLease decided:
// the key is served now, and the request goes through the pool again.
var errDecideAgain = errors.New("allot: decide again")

// overCapShare names the fallback share that the keys a full key table
// leaves without a pool draw on together: not a valid key, so no key's.
const overCapShare = ""

// decideStrict asks the allocator; when it cannot answer, the rule's
// failure mode decides: closed denies, open draws on the fallback share
// named shareKey (the key's own, or the one all keys beyond a full key
// table share, so that they stay within limit/N together).
func (c *Client) decideStrict(ctx context.Context, rs *ruleState, key string, n int64, shareKey string) (Decision, error) {
	r := rs.rule.ForKey(key)
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CheckTimeout)
	defer cancel()
	done := c.metrics.rpc("Check")
	resp, err := c.api.Check(cctx, &allotv1.CheckRequest{Rule: r.Name, Key: key, Cost: n})
	done(err)
	if err == nil {
		c.reportStrictSoon()
		rs.counts.decide(resp.GetAllowed(), ModeStrict)
		return Decision{Allowed: resp.GetAllowed(), Limit: resp.GetLimit(), Remaining: resp.GetRemaining(),
			RetryAfter: resp.GetRetryAfter().AsDuration(), ResetAfter: resp.GetResetAfter().AsDuration(), Mode: ModeStrict, Rule: r.Name}, nil
	}
	switch {
	case status.Code(err) == codes.NotFound:
		c.requestRules()
		return Decision{}, fmt.Errorf("%w %q: %v", ErrUnknownRule, r.Name, err)
	case status.Code(err) == codes.InvalidArgument:
		return Decision{}, fmt.Errorf("allot: %w", err)
	}
	if err := callerErr(ctx); err != nil {
		return Decision{}, err
	}
	c.logMode("allot: strict rule decided without the allocator", "rule", r.Name, "failure", r.Failure.String(), "err", err)
	if r.Failure == rules.FailClosed {
		rs.counts.decide(false, ModeFallback)
		return Decision{Limit: r.Limit, RetryAfter: r.Lease.Refresh, Mode: ModeFallback, Rule: r.Name}, nil
	}
	now := c.cfg.Clock.Now()
	bd := rs.shares.Get(r, shareKey, now).AllowN(r, c.fleetSize(), now, n)
	if bd.Allowed && rs.table == nil { // reported once the allocator is back
		c.debts.add(r.Name, key, n, now)
	}
	rs.counts.decide(bd.Allowed, ModeFallback)
	return Decision{Allowed: bd.Allowed, Limit: r.Limit, Remaining: bd.Remaining,
		RetryAfter: bd.RetryAfter, ResetAfter: bd.ResetAfter, Mode: ModeFallback, Rule: r.Name}, nil
}
