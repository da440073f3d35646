package client

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Limiter is a handle on one rule, for callers that know their rules at
// start: its calls skip the rule's lookup by name. It follows rule
// reloads; if its rule is removed, its calls fail with ErrUnknownRule.
type Limiter struct {
	c    *Client
	name string
	// seen is the rule snapshot the handle last resolved its rule in; a
	// new one (a reload) makes it resolve again.
	seen atomic.Pointer[limiterState]
}

type limiterState struct {
	snapshot *ruleSnapshot
	rs       *ruleState // nil: the rule is not in snapshot
}

// Limiter returns a handle on the named rule. An unknown name is an error
// here, once, rather than a refusal on every call.
func (c *Client) Limiter(name string) (*Limiter, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	t := c.rules.Load()
	rs := t.byName[name]
	if rs == nil {
		return nil, fmt.Errorf("%w %q (known: %d rules, version %s)", ErrUnknownRule, name, len(t.byName), t.version)
	}
	l := &Limiter{c: c, name: name}
	l.seen.Store(&limiterState{snapshot: t, rs: rs})
	return l, nil
}

// Name is the rule's name.
func (l *Limiter) Name() string { return l.name }

// state is the rule as the client applies it now.
func (l *Limiter) state() *ruleState {
	t := l.c.rules.Load()
	s := l.seen.Load()
	if s.snapshot != t {
		s = &limiterState{snapshot: t, rs: t.byName[l.name]}
		l.seen.Store(s)
	}
	return s.rs
}

// Allow reports whether one request for key may proceed; see Client.Allow.
func (l *Limiter) Allow(ctx context.Context, key string) bool {
	rs := l.state()
	if rs != nil && rs.table != nil {
		if k := rs.table.Lookup(key); k != nil {
			if _, ok := k.Take(1); ok {
				return true
			}
		}
	}
	d, _, err := l.c.decide(ctx, rs, l.name, key, 1)
	return err == nil && d.Allowed
}

// AllowN decides a request that costs n tokens; see Client.AllowN.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	d, _, err := l.c.decide(ctx, l.state(), l.name, key, n)
	return d, err
}

// Reserve decides a request whose tokens may be given back; see
// Client.Reserve.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64) (*Reservation, error) {
	return l.c.reserve(ctx, l.state(), l.name, key, n)
}

// Wait blocks until one request for key may proceed; see Client.Wait.
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.c.WaitN(ctx, l.name, key, 1)
}
