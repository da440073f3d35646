// Package sim is Allot's deterministic fleet simulator: nodes running the
// real lease Core and key state machines (internal/lease) and the real
// fallback allowances, the real allocator service (internal/server) over
// the real memory store, a simulated network (delay, jitter, loss,
// duplication, reordering, partitions), simulated clocks (skew, drift,
// steps), crashes and restarts, rule reloads and shaped load, all in one
// goroutine and drawn from one seed. Every admission goes to the oracle
// (internal/sim/oracle), which shares no code with any of it and checks
// each bound of docs/bounds.md at every step. A seed replays exactly; a
// failing seed prints the key's last events.
package sim
