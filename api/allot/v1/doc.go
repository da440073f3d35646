// Package allotv1 is the allot.v1 wire, generated from allocator.proto
// (the Allocator service: rules, leases, returns, checks) and admin.proto
// (the Admin service: runtime overrides) by make generate. Fields are
// added, never given a new meaning.
package allotv1
