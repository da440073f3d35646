// Package clienthook sets what a client.Config holds for this module
// alone: the clock that tests and simulations step. The client package
// registers the setter when it loads, so that no internal type appears in
// the Config a service fills in.
package clienthook

import "github.com/allot-dev/allot/internal/clock"

// setClock is the client package's setter; nil until that package loads.
var setClock func(cfg any, clk clock.Clock)

// Register is for the client package, which calls it at init.
func Register(set func(cfg any, clk clock.Clock)) { setClock = set }

// SetClock makes clk the clock of cfg, a *client.Config: its leases,
// fallback allowances, timers and rate-limited logs all read it. Without one a
// client runs on the machine's clock.
func SetClock(cfg any, clk clock.Clock) { setClock(cfg, clk) }
