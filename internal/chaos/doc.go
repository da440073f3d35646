// Package chaos is Allot's chaos suite: real allocators (child processes it
// kills and stops), a real Redis and eight SDK nodes under load, one fault
// per scenario, each held to the bounds of DESIGN.md.
//
// The suite is this package's tests. `make test` runs a short version;
// `make chaos` runs it in full and writes the table the README carries
// (results.md). The package has no code outside its tests.
package chaos
