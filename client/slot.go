package client

// Concurrency rules: a slot taken for each request in flight, leased from
// the allocator (internal/slots).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/slots"
	"github.com/allot-dev/allot/internal/upstream"
)

var (
	// ErrNoSlot: TakeSlot found every slot of the key in use. The error is
	// a *SlotError, whose RetryAfter says when to try again.
	ErrNoSlot = errors.New("allot: no slot free")
	// ErrNotConcurrency: TakeSlot was given a rule that is not a
	// concurrency rule.
	ErrNotConcurrency = errors.New("allot: not a concurrency rule")
	// ErrConcurrencyRule: Allow (AllowN, AllowAll, Reserve, Wait) was given
	// a concurrency rule, which limits requests in flight: use TakeSlot.
	ErrConcurrencyRule = errors.New("allot: a concurrency rule takes slots, not tokens")
)

// SlotError is TakeSlot's refusal: errors.Is(err, ErrNoSlot).
type SlotError struct {
	Rule string
	// RetryAfter is the time a slot of the key is held, as this node has
	// observed it: by then, on average, every slot has turned over.
	RetryAfter time.Duration
	// Mode says whether the node's lease (ModeLease) or its fallback allowance
	// of limit/N in flight (ModeFallback) refused.
	Mode Mode
}

func (e *SlotError) Error() string {
	return fmt.Sprintf("allot: rule %q: no slot free (%s), retry after %v", e.Rule, e.Mode, e.RetryAfter)
}

// Is makes errors.Is(err, ErrNoSlot) hold.
func (e *SlotError) Is(target error) bool { return target == ErrNoSlot }

// Slot is one request's place under a concurrency rule, from TakeSlot until
// Release. Release it when the work ends, once; a deferred Release is the
// usual form.
type Slot struct {
	key  uint32 // its key's number (slots.ByRef): a Slot holds no pointer
	mode Mode
	done bool
}

// Slots come from slabs, a new one each slotSlabSize takes: one allocation
// for many, of memory the collector does not scan (a Slot holds no
// pointer), and a Slot is never handed out twice, so that a second Release
// of one can never give back another caller's.
type slotSlab struct {
	next atomic.Int64
	s    [slotSlabSize]Slot
}

const slotSlabSize = 256

var slabs atomic.Pointer[slotSlab]

func newSlot(k *slots.Key) *Slot {
	for {
		sl := slabs.Load()
		if sl != nil {
			if i := sl.next.Add(1) - 1; i < slotSlabSize {
				s := &sl.s[i]
				s.key, s.mode = k.Ref(), Mode(k.Mode())
				return s
			}
		}
		slabs.CompareAndSwap(sl, new(slotSlab))
	}
}

// Release gives the slot back, to this node's lease. A second Release, or
// one on a nil Slot, does nothing. A Slot is its caller's: Release it from
// one goroutine (the one that took it, or one it handed the work to).
func (s *Slot) Release() {
	if s == nil || s.done {
		return
	}
	s.done = true
	slots.ByRef(s.key).Give()
}

// Mode says where the slot came from: the node's lease or its fallback.
func (s *Slot) Mode() Mode { return s.mode }

// TakeSlot takes a slot of key under the concurrency rule: at most the
// rule's limit of them are held at once across the fleet. On a key whose
// lease has a slot free it is an in-memory step, no network, no clock. A
// key new to the node waits for its first lease (at most
// Lease.FirstLeaseWait, and ctx). A refusal is a *SlotError (ErrNoSlot)
// with a RetryAfter.
func (c *Client) TakeSlot(ctx context.Context, rule, key string) (*Slot, error) {
	if t := c.slotTables.Load(); t != nil {
		if tb := (*t)[rule]; tb != nil {
			if k := tb.Lookup(key); k != nil && k.Take() {
				return newSlot(k), nil
			}
		}
	}
	return c.takeSlot(ctx, rule, key)
}

// takeSlot is TakeSlot's path for all but a free slot of a leased key.
func (c *Client) takeSlot(ctx context.Context, rule, key string) (*Slot, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	rs := c.rules.Load().get(rule)
	if rs == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	var tb *slots.Table
	if t := c.slotTables.Load(); t != nil {
		tb = (*t)[rule]
	}
	if tb == nil {
		return nil, fmt.Errorf("%w: rule %q is %s; use Allow", ErrNotConcurrency, rule, rs.rule.Algorithm)
	}
	if !validKey(key) {
		return nil, ErrInvalidKey
	}
	k := tb.Key(key)
	if k == nil { // a new key, and the node holds Lease.MaxKeys keys of slots
		rs.counts.refused(ModeLease)
		return nil, &SlotError{Rule: rule, RetryAfter: rs.rule.Lease.Refresh, Mode: ModeLease}
	}
	if k.Take() {
		return newSlot(k), nil
	}
	if wait := c.cfg.Lease.FirstLeaseWait; wait >= 0 {
		select {
		case <-k.First():
		default:
			t := c.cfg.clock.NewTimer(max(wait, c.cfg.RPCTimeout))
			select {
			case <-k.First():
			case <-t.C():
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
			t.Stop()
			if k.Take() {
				return newSlot(k), nil
			}
		}
	}
	mode := Mode(k.Mode())
	if mode == 0 {
		mode = ModeLease
	}
	rs.counts.refused(mode)
	return nil, &SlotError{Rule: rule, RetryAfter: k.RetryAfter(rs.rule.Lease.Refresh), Mode: mode}
}

// startSlots starts the slots' loop, before the first rules apply.
func (c *Client) startSlots() {
	c.slots = slots.NewManager(slots.Config{Transport: slotTransport{c}, Clock: c.cfg.clock, Nodes: c.fleetSize,
		Unreachable: upstream.IsUnreachable, Timeout: c.leaseTimeout, Logger: c.cfg.Logger,
		Alone: len(c.cfg.Allocators) == 0 && c.gossip == nil, Taken: c.slotsTaken, MaxKeys: c.cfg.Lease.MaxKeys})
}

// slotsTaken counts slots taken, as allowed decisions: the loop reports
// them, so that a take costs the hot path no counter.
func (c *Client) slotsTaken(rule string, n int64, mode slots.Mode) {
	m := Mode(mode)
	if m != ModeLease && m != ModeFallback {
		m = ModeLease
	}
	if rs := c.rules.Load().get(rule); rs != nil {
		rs.counts.allowed[m].Add(float64(n))
	}
}

// applySlotRules gives each concurrency rule of the set a table of keys,
// and forgets the keys of those that went.
func (c *Client) applySlotRules(set *rules.Set) {
	next := map[string]*slots.Table{}
	for _, r := range set.Rules() {
		if r.IsConcurrency() {
			next[r.Name] = c.slots.Table(r)
		}
	}
	if old := c.slotTables.Swap(&next); old != nil {
		for name := range *old {
			if next[name] == nil {
				c.slots.Forget(name)
			}
		}
	}
}

// slotTransport carries the slots' calls, on the connections every lease
// call fails over on.
type slotTransport struct{ c *Client }

func (t slotTransport) Acquire(ctx context.Context, reqs []slots.Request) ([]slots.Grant, error) {
	pr := &allotv1.AcquireRequest{NodeId: t.c.cfg.NodeID, Requests: make([]*allotv1.LeaseRequest, len(reqs))}
	for i, r := range reqs {
		kept := r.Kept
		pr.Requests[i] = &allotv1.LeaseRequest{Rule: r.Rule, Key: r.Key, Want: r.Want, SlotsKept: &kept, Seq: uint64(r.Seq)}
	}
	resp, err := t.c.api.Acquire(ctx, pr, grpc.WaitForReady(t.c.slots.Down()))
	if err != nil {
		return nil, err
	}
	out := make([]slots.Grant, len(resp.GetLeases()))
	for i, l := range resp.GetLeases() {
		out[i] = slots.Grant{Granted: l.GetGranted(), Share: l.GetSlotShare(), TTL: l.GetTtl().AsDuration()}
	}
	return out, nil
}

func (t slotTransport) Release(ctx context.Context, reqs []slots.Request) error {
	pr := &allotv1.ReleaseRequest{NodeId: t.c.cfg.NodeID, Returns: make([]*allotv1.Return, len(reqs))}
	for i, r := range reqs {
		pr.Returns[i] = &allotv1.Return{Rule: r.Rule, Key: r.Key}
	}
	_, err := t.c.api.Release(ctx, pr)
	return err
}
