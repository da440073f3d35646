package allocator

// An allocator with a parent is a region of a tree (internal/region): the
// keys of its global rules are lent out of its leases on the parent, and
// the rest is its store's.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/internal/region"
	"github.com/allot-dev/allot/internal/rules"
)

func (c *Config) checkRegion() error {
	switch {
	case c.Parent == "" && c.Region != "":
		return errors.New("--region: names this allocator at its parent; give --parent too")
	case c.Parent != "" && c.Region == "":
		return errors.New("--parent: needs --region, the name this allocator holds its leases under at the parent (unique among its regions)")
	}
	return nil
}

// openRegion puts the region in front of the store when the allocator has
// a parent: the service lends from it (a.lending), and the store's own
// health, keys and overrides are still the store's.
func (a *Allocator) openRegion(set *rules.Set) error {
	a.lending = a.store
	if a.cfg.Parent == "" {
		a.warnGlobalWithoutParent(set)
		return nil
	}
	rs, err := region.New(region.Config{Name: a.cfg.Region, Parent: a.cfg.Parent, Local: a.store, Clock: a.clock, Logger: a.log})
	if err != nil {
		return fmt.Errorf("--parent: %w", err)
	}
	a.region, a.lending = rs, rs
	a.registerRegion()
	a.log.Info("region: global rules are leased from the parent", "parent", a.cfg.Parent, "region", a.cfg.Region,
		"global_rules", globalRules(set))
	return nil
}

// warnGlobalWithoutParent says once that global rules are served from
// this allocator's store alone: right at the root of a tree, and a limit
// per region anywhere else.
func (a *Allocator) warnGlobalWithoutParent(set *rules.Set) {
	if a.cfg.Parent != "" {
		return
	}
	if names := globalRules(set); len(names) > 0 {
		a.warnGlobal.Do(func() {
			a.log.Warn("rules of scope global are served from this allocator's own store, as regional ones: right for the root of a tree of regions, "+
				"but each region without --parent limits them alone", "global_rules", names)
		})
	}
}

func globalRules(set *rules.Set) []string {
	var names []string
	for _, r := range set.Rules() {
		if r.IsGlobal() {
			names = append(names, r.Name)
		}
	}
	return slices.Clip(names)
}

// closeRegion gives the region's leases back to the parent.
func (a *Allocator) closeRegion() {
	if a.region == nil {
		return
	}
	if err := a.region.Close(); err != nil {
		a.log.Warn("closing the region", "err", err)
	}
}

// registerRegion exports what the region holds of the parent's and whether
// the parent answers.
func (a *Allocator) registerRegion() {
	rs := a.region
	a.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_parent_up", Help: "1 while the region's calls to its parent (--parent) are answered, 0 after one failed as an outage does.",
		}, func() float64 {
			if rs.ParentDown() {
				return 0
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_global_keys", Help: "Keys of global rules the region holds leases on at its parent.",
		}, func() float64 { return float64(rs.Keys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_returned_dropped_total", Help: "Tokens of global keys the region's nodes gave back, which the region does not lend again (the parent counts them spent).",
		}, func() float64 { return float64(rs.Lost()) }),
	)
}
