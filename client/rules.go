package client

// The rules a node applies: fetched from the allocator, refetched when
// they change, and published as one immutable snapshot that decisions read.

import (
	"context"
	"time"

	"google.golang.org/grpc"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
)

// ruleSnapshot is the immutable set of rules a decision reads: one
// rules version, replaced whole on a reload.
type ruleSnapshot struct {
	version string
	byName  map[string]*ruleState
	// few are the rules when there are at most fewRules of them, and
	// fewNames their names, side by side, for get.
	few      []*ruleState
	fewNames []string
}

// fewRules is how many rules get scans rather than hashes for: comparing
// a handful of names costs less than hashing one (a Go map of small
// strings hashes once two names have the same length), and the lookup is
// a third of a leased decision's cost.
const fewRules = 8

// get is the named rule's state, nil if there is none: the hot path's
// lookup.
func (s *ruleSnapshot) get(name string) *ruleState {
	if s.few == nil {
		return s.byName[name]
	}
	for i, n := range s.fewNames {
		if n == name {
			return s.few[i]
		}
	}
	return nil
}

// ruleState is one rule as this node applies it.
type ruleState struct {
	rule       *rules.Rule
	table      *lease.Table // the rule's keys and their leases; nil for strict rules
	allowances *fallback.Allowances
	waits      *waitQueues
	counts     *ruleCounters
}

// Rule returns the named rule as this node applies it (from the allocator,
// or from Config.Rules until the allocator's arrive).
func (c *Client) Rule(name string) (Rule, bool) {
	rs := c.rules.Load().byName[name]
	if rs == nil {
		return Rule{}, false
	}
	r := rs.rule
	out := Rule{Name: r.Name, Algorithm: r.Algorithm.String(), Limit: r.Limit, Period: r.Period, Burst: r.Burst,
		Failure: r.Failure.String(), Strict: r.Strict, LeaseMin: r.Lease.Min, LeaseMax: r.Lease.Max,
		LeaseTTL: r.Lease.TTL, LeaseRefresh: r.Lease.Refresh, Shadow: r.Shadow, MaxHold: r.MaxHold}
	for _, o := range r.Overrides {
		out.Overrides = append(out.Overrides, Override{Key: o.Key, Match: o.Match, Limit: o.Limit, Burst: o.Burst})
	}
	return out, true
}

func (c *Client) fetchRules(ctx context.Context, opts ...grpc.CallOption) error {
	resp, err := c.api.GetRules(ctx, &allotv1.GetRulesRequest{NodeId: c.cfg.NodeID}, opts...)
	if err != nil {
		return err
	}
	// The allocator's count of live nodes, this one among them: a fleet
	// without gossip or Config.Nodes divides by it before its first lease.
	c.mgr.SawFleet(int(resp.GetNodes()))
	if cur := c.rules.Load(); cur.version == resp.GetVersion() && resp.GetVersion() != "" {
		return nil
	}
	set, err := rules.FromProto(resp)
	if err != nil {
		return err
	}
	c.applyRules(set)
	return nil
}

// rulesLoop refetches the rules when the allocator reports a new version,
// on request, and every half minute; never twice within refetchGap, so that
// allocators that disagree about the rules (one failed its reload) cannot
// make the node apply one set, then the other, then the first again.
func (c *Client) rulesLoop() {
	defer c.done.Done()
	t := c.cfg.clock.NewTimer(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.refresh:
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
		if err := c.fetchRules(ctx); err != nil {
			c.cfg.Logger.Debug("allot: fetching rules", "err", err)
		}
		cancel()
		t.Stop()
		t.Reset(refetchGap)
		select {
		case <-c.stop:
			return
		case <-t.C():
		}
		t.Reset(30*time.Second - refetchGap)
	}
}

// refetchGap is the least time between two fetches of the rules.
const refetchGap = 2 * time.Second

func (c *Client) requestRules() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// applyRules builds a new rule snapshot; the keys of rules that stay keep
// their leases, the keys of rules that went are returned.
func (c *Client) applyRules(set *rules.Set) {
	old := c.rules.Load()
	next := &ruleSnapshot{version: set.Version(), byName: make(map[string]*ruleState, set.Len())}
	for _, r := range set.Rules() {
		rs := &ruleState{rule: r, counts: c.metrics.rule(r.Name, r.Shadow), allowances: &fallback.Allowances{}, waits: &waitQueues{}}
		if prev, ok := old.byName[r.Name]; ok { // keep what callers are in the middle of
			rs.allowances, rs.waits = prev.allowances, prev.waits
		}
		if r.Leasable() {
			rs.table = c.mgr.Table(r)
		}
		next.byName[r.Name] = rs
	}
	if len(next.byName) <= fewRules {
		next.few = make([]*ruleState, 0, len(next.byName))
		next.fewNames = make([]string, 0, len(next.byName))
		for _, r := range set.Rules() {
			next.few = append(next.few, next.byName[r.Name])
			next.fewNames = append(next.fewNames, r.Name)
		}
	}
	for name, prev := range old.byName {
		if now, ok := next.byName[name]; !ok || (prev.table != nil && now.table == nil) {
			c.mgr.Forget(name)
		}
	}
	c.applySlotRules(set)
	c.rules.Store(next)
	c.cfg.Logger.Info("allot: rules applied", "rules", set.Len(), "version", set.Version())
}
