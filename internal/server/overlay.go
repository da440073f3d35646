package server

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/lograte"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Overlay serves the rules file's rules with the runtime overrides of the
// store merged in (rules.Set.WithRuntime says how). It follows the store:
// every poll it reads one version a rule, reads a rule's overrides again
// only when its version moved, and serves the merged set, whose version
// changes with it, so that nodes fetch it from their next Acquire answer
// on. Allocators sharing a store each run one and serve the same version.
// An override that expires is dropped at the first poll after, and
// deleted from the store.
type Overlay struct {
	srv      *Server
	store    store.Overrides
	clock    clock.Clock
	log      *slog.Logger
	failures *lograte.Logger // a store outage fails every poll
	timeout  time.Duration

	mu     sync.Mutex // one sync at a time: a sync reads and then writes the cache
	file   *rules.Set
	byRule map[string]*ruleOverrides // the store's, as last read
	next   time.Time                 // the earliest expiry among the cache's; zero: none

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// ruleOverrides are one rule's runtime overrides, as read at version.
type ruleOverrides struct {
	version int64
	list    []rules.RuntimeOverride // by key
}

// NewOverlay serves file on srv, with the overrides of ovs once Sync has
// read them.
func NewOverlay(srv *Server, ovs store.Overrides, file *rules.Set) *Overlay {
	o := &Overlay{srv: srv, store: ovs, clock: srv.clock, log: srv.log, timeout: srv.timeout,
		file: file, byRule: map[string]*ruleOverrides{}, stop: make(chan struct{}), done: make(chan struct{})}
	o.failures = lograte.New(o.log, o.clock, 0, 0)
	close(o.done) // until Run
	return o
}

// File is the rules file's set, without the runtime overrides.
func (o *Overlay) File() *rules.Set {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.file
}

// SetFile serves a new rules file (a reload) with the overrides known;
// the next Sync reads those of rules it adds.
func (o *Overlay) SetFile(set *rules.Set) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.file = set
	o.applyLocked()
}

// Sync reads what changed in the store, serves the merged rules when
// something did or an override expired, and deletes the overrides that
// expired. On an error the rules served stay as they were.
func (o *Overlay) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, o.file.Len())
	for _, r := range o.file.Rules() {
		names = append(names, r.Name)
	}
	versions, err := o.store.OverrideVersions(ctx, names)
	if err != nil {
		return err
	}
	changed := false
	for i, name := range names {
		cur := o.byRule[name]
		if cur == nil && versions[i] == 0 || cur != nil && cur.version == versions[i] {
			continue
		}
		v, list, err := o.store.LoadOverrides(ctx, name)
		if err != nil {
			return err
		}
		slices.SortFunc(list, func(a, b rules.RuntimeOverride) int { return strings.Compare(a.Key, b.Key) })
		o.byRule[name] = &ruleOverrides{version: v, list: list}
		changed = true
	}
	now := o.clock.Now()
	if changed || !o.next.IsZero() && !now.Before(o.next) {
		o.applyLocked()
		o.expireLocked(ctx, now)
	}
	return nil
}

// applyLocked serves the file with the live overrides of the cache.
func (o *Overlay) applyLocked() {
	now := o.clock.Now()
	var all []rules.RuntimeOverride
	o.next = time.Time{}
	for _, r := range o.file.Rules() {
		c := o.byRule[r.Name]
		if c == nil {
			continue
		}
		for _, ov := range c.list {
			if !ov.Live(now) {
				continue
			}
			all = append(all, ov)
			if !ov.Expires.IsZero() && (o.next.IsZero() || ov.Expires.Before(o.next)) {
				o.next = ov.Expires
			}
		}
	}
	set, errs := o.file.WithRuntime(all, now)
	for _, err := range errs {
		o.log.Warn("admin: a runtime override is not applied", "err", err)
	}
	if old := o.srv.Rules(); old.Version() != set.Version() {
		o.srv.SetRules(set)
		o.log.Info("admin: runtime overrides applied", "overrides", len(all), "rules_version", set.Version(), "previous_version", old.Version())
	}
}

// expireLocked deletes the cache's expired overrides from the store, each
// only if it is still as read (one set again meanwhile stays). Another
// allocator may delete it first; either way the version moves, and the
// next Sync reads the rule again.
func (o *Overlay) expireLocked(ctx context.Context, now time.Time) {
	for _, c := range o.byRule {
		for _, ov := range c.list {
			if ov.Live(now) {
				continue
			}
			if _, err := o.store.ExpireOverride(ctx, ov); err != nil {
				o.failures.Warn("admin: deleting an expired override", "rule", ov.Rule, "key", ov.Key, "err", err)
				return
			}
		}
	}
}

// Lookup is key's live runtime override of rule, as last read.
func (o *Overlay) Lookup(rule, key string) (rules.RuntimeOverride, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.byRule[rule]
	if c == nil {
		return rules.RuntimeOverride{}, false
	}
	i, found := slices.BinarySearchFunc(c.list, key, func(ov rules.RuntimeOverride, k string) int { return strings.Compare(ov.Key, k) })
	if !found || !c.list[i].Live(o.clock.Now()) {
		return rules.RuntimeOverride{}, false
	}
	return c.list[i], true
}

// List is up to n live runtime overrides of rule with keys after after,
// in key order, and whether more follow.
func (o *Overlay) List(rule, after string, n int) (page []rules.RuntimeOverride, more bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.byRule[rule]
	if c == nil {
		return nil, false
	}
	now := o.clock.Now()
	i, found := slices.BinarySearchFunc(c.list, after, func(ov rules.RuntimeOverride, k string) int { return strings.Compare(ov.Key, k) })
	if found {
		i++
	}
	for ; i < len(c.list); i++ {
		if !c.list[i].Live(now) {
			continue
		}
		if len(page) == n {
			return page, true
		}
		page = append(page, c.list[i])
	}
	return page, false
}

// Run syncs every interval until Stop; a failed sync is logged, rate
// limited, and the next one tries again. The polls are paced by the real
// clock: the injected one says when overrides expire, and the tests that
// step it count the timers of the loops they drive, which this is not.
func (o *Overlay) Run(every time.Duration) {
	o.done = make(chan struct{})
	go func() {
		defer close(o.done)
		t := clock.Real().NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-o.stop:
				return
			case <-t.C():
			}
			if err := o.Sync(context.Background()); err != nil {
				o.failures.Warn("admin: reading runtime overrides from the store; serving those last read", "err", err)
			}
			t.Reset(every)
		}
	}()
}

// Stop ends Run and waits for it.
func (o *Overlay) Stop() {
	o.stopOnce.Do(func() { close(o.stop) })
	<-o.done
}
