// Package oracle judges a fleet simulation's log of events against the
// rules alone.
//
// The oracle owns the verdict of the fleet simulator (internal/sim): every
// bound of docs/bounds.md, recomputed from a rule's fields and the events,
// checked at every step, and the accuracy and fairness of a run against an
// ideal central limiter. It shares no code with the simulator nor with
// Allot's limiter (lease, store, fallback, bucket, client): it imports the
// standard library only, so that a bug in the limiter cannot hide in the
// check.
//
// The simulator feeds it events in the order of true time: SetRule, then
// Offered, Admitted, Granted, Returned and Released as they happen; Fault
// and Cut may be recorded at any time, ExpectFair before its interval.
// Each Admitted event costs amortized O(1) (a reload adds an O(log n) hull
// search per bound it raises); the oracle never rescans the log. Violations lists what broke, with a short trace of
// the key's events around it; Finish reports accuracy and fairness.
//
// What is checked, exactly, and where it departs from the simulation's
// brief, is in docs/simulation.md. An Oracle is not safe for concurrent
// use.
package oracle
