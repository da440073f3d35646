// Package chaos is Allot's chaos suite: real allocators (child processes it
// kills and stops), a real Redis and eight SDK nodes under load, one fault
// per scenario, each held to the fleet's bounds (docs/design.md, guarantee 2).
//
// The suite is this package's tests. `make test` runs a short version;
// `make chaos` runs it in full and writes its table (results.md), which
// docs/testing.md carries. The package has no code outside its tests.
package chaos
