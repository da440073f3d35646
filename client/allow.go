package client

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/upstream"
)

// Mode says which part of Allot made a decision.
type Mode uint8

const (
	// ModeLease: decided locally from tokens the allocator lent this node.
	ModeLease Mode = iota + 1
	// ModeFallback: decided locally from the node's fallback allowance,
	// limit/N, because the allocator could not be reached.
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
	// tokens of its lease, its fallback allowance, or the allocator's count for
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
	// No key check: a key's lease exists only for a key that passed it.
	if rs := c.rules.Load().get(rule); rs != nil && rs.table != nil {
		if k := rs.table.Lookup(key); k != nil {
			if _, ok := k.Take(1); ok {
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
	d, _, err := c.decide(ctx, c.rules.Load().get(rule), rule, key, n)
	return d, err
}

// decide decides a request on rs, the state of rule (nil if unknown), and
// says where its tokens came from. A shadow rule's refusal is let through.
func (c *Client) decide(ctx context.Context, rs *ruleState, rule, key string, n int64) (Decision, spend, error) {
	r, err := c.check(rs, rule, key, n)
	if err != nil {
		return Decision{}, spend{}, err
	}
	var d Decision
	var sp spend
	if rs.table == nil {
		d, err = c.decideStrict(ctx, rs, r, key, n, key)
	} else {
		d, sp, err = c.take(ctx, rs, r, key, n, overCapCheck)
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

// state finds the rule and checks the request's shape; it returns the
// key's rule (its override's, if any) as check does.
func (c *Client) state(rule, key string, n int64) (*ruleState, *rules.Rule, error) {
	rs := c.rules.Load().get(rule)
	r, err := c.check(rs, rule, key, n)
	return rs, r, err
}

// check checks a request on rs, the state of rule (nil if unknown), and
// returns the key's rule: the rule with the key's override, resolved once
// for the whole decision.
func (c *Client) check(rs *ruleState, rule, key string, n int64) (*rules.Rule, error) {
	switch {
	case c.closed.Load():
		return nil, ErrClosed
	case rs == nil:
		return nil, c.unknownRule(rule)
	case !validKey(key):
		return nil, ErrInvalidKey
	case n <= 0:
		return nil, ErrInvalidCost
	case rs.rule.IsConcurrency():
		return nil, fmt.Errorf("%w: rule %q limits requests in flight: take a slot (TakeSlot)", ErrConcurrencyRule, rule)
	}
	r := rs.rule.ForKey(key)
	if n > r.Capacity() {
		return nil, fmt.Errorf("%w: cost %d, capacity %d of rule %q for this key", ErrCostAboveCapacity, n, r.Capacity(), rule)
	}
	return r, nil
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
	key       *lease.KeyLease
	v         lease.Verdict
	allowance *fallback.Allowance // a strict rule's fallback
	n         int64
}

// undo gives the tokens back and reports how many went back: none when
// their lease has ended since, or when the allocator decided (strict).
func (s spend) undo() int64 {
	switch {
	case s.allowance != nil:
		if s.allowance.Refund(s.n) {
			return s.n
		}
	case s.key != nil:
		return s.key.Undo(s.v, s.n)
	}
	return 0
}

// overCap says what take does with a new key the node has no room for
// (Lease.MaxKeys).
type overCap uint8

const (
	// overCapCheck asks the allocator (Check), as for a strict rule.
	overCapCheck overCap = iota
	// overCapRefuse refuses the key: AllowAll must be able to give back
	// what it took, and a Check cannot be given back.
	overCapRefuse
)

// take decides a leasable rule: the key's lease, or, when the allocator
// cannot be reached, its fallback allowance. A key with no lease yet
// waits for its first while the allocator answers (docs/bounds.md, rule
// 1): at most FirstLeaseWait, and within ctx. keyRule is the key's rule
// (check), for a key the node has no room for; a key with a lease decides
// by the rule its lease keeps.
func (c *Client) take(ctx context.Context, rs *ruleState, keyRule *rules.Rule, key string, n int64, full overCap) (Decision, spend, error) {
	attempt := lease.FirstAttempt
	var deadline clock.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		k := rs.table.Key(key)
		if k == nil { // a new key, and the node holds Lease.MaxKeys keys
			if full == overCapRefuse {
				rs.counts.refused(ModeStrict)
				return Decision{Limit: keyRule.Limit, RetryAfter: keyRule.Lease.Refresh, Mode: ModeStrict, Rule: keyRule.Name}, spend{}, nil
			}
			d, err := c.decideStrict(ctx, rs, keyRule, key, n, overCapAllowance)
			return d, spend{}, err
		}
		// (Armed before the decision: an answer that comes between the two
		// closes this channel, not the next one.)
		answered := c.mgr.Answered()
		v := k.Decide(n, c.cfg.clock.Mono(), c.cfg.clock.Now(), c.nodesFor(k.Holders()), attempt)
		if v.Gone {
			continue // it left its table under us; the table makes a fresh one
		}
		r := k.Rule()
		if v.Wait {
			if deadline == nil && c.cfg.Lease.FirstLeaseWait > 0 {
				deadline = c.cfg.clock.NewTimer(max(c.cfg.Lease.FirstLeaseWait, c.leaseTimeout()))
			}
			attempt = lease.AfterWait
			if deadline != nil && !c.closed.Load() {
				select {
				case <-answered:
					continue
				case <-deadline.C():
				case <-ctx.Done():
					return Decision{}, spend{}, ctx.Err()
				}
			}
			// No answer in time (or no waiting): refused, as a served key
			// with nothing left would be.
			rs.counts.refused(ModeLease)
			return Decision{Limit: r.Limit, RetryAfter: max(c.rtts.Slowest(), time.Millisecond), Mode: ModeLease, Rule: r.Name}, spend{}, nil
		}
		mode := ModeLease
		if v.Fallback {
			mode = ModeFallback
		}
		rs.counts.decide(v.Allowed, mode)
		d := Decision{Allowed: v.Allowed, Limit: r.Limit, Remaining: v.Remaining,
			RetryAfter: v.RetryAfter, ResetAfter: v.ResetAfter, Mode: mode, Rule: r.Name}
		if !v.Allowed {
			if mode == ModeLease {
				// Refused on an empty lease: its refill comes from this
				// node's own loop and calls. A caller that asks again at
				// once (a worker spinning on Allow) must let them run, or
				// callers that saturate the CPU starve the lease they wait
				// on, the loop's renewals and their answers waiting behind
				// the spinning callers (TestSaturated).
				runtime.Gosched()
			}
			return d, spend{}, nil
		}
		return d, spend{key: k, v: v, n: n}, nil
	}
}

// overCapAllowance names the fallback allowance that the keys beyond
// Lease.MaxKeys, which have no lease of their own, draw on together: not a
// valid key, so no key's.
const overCapAllowance = ""

// decideStrict asks the allocator about key, whose rule is r (check);
// when it cannot answer, the rule's failure mode decides: closed denies,
// open draws on the fallback allowance named allowanceKey (the key's own, or the
// one all keys beyond Lease.MaxKeys share, so that they stay within
// limit/N together).
func (c *Client) decideStrict(ctx context.Context, rs *ruleState, r *rules.Rule, key string, n int64, allowanceKey string) (Decision, error) {
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
	if err := upstream.CallerErr(ctx); err != nil {
		return Decision{}, err
	}
	c.logMode("allot: strict rule decided without the allocator", "rule", r.Name, "failure", r.Failure.String(), "err", err)
	if r.Failure == rules.FailClosed {
		rs.counts.refused(ModeFallback)
		return Decision{Limit: r.Limit, RetryAfter: r.Lease.Refresh, Mode: ModeFallback, Rule: r.Name}, nil
	}
	now := c.cfg.clock.Mono()
	a := rs.allowances.Get(r, allowanceKey, now)
	bd, _ := a.Decide(r, c.fleetSize(), c.mgr.Windows(time.Duration(c.cfg.clock.Now().UnixNano())-now), now, n)
	if bd.Allowed && rs.table == nil { // reported once the allocator is back
		c.debts.Add(r.Name, key, n, c.cfg.clock.Now())
	}
	rs.counts.decide(bd.Allowed, ModeFallback)
	return Decision{Allowed: bd.Allowed, Limit: r.Limit, Remaining: bd.Remaining,
		RetryAfter: bd.RetryAfter, ResetAfter: bd.ResetAfter, Mode: ModeFallback, Rule: r.Name}, nil
}
