package store

// The allocator loads the time zones of calendar rules (rules.Calendar),
// and may run where no zone database is installed (a static binary on an
// empty image): the store, linked into the allocator and not into the SDK,
// carries Go's copy, so that every IANA zone loads wherever the allocator
// runs, while nodes, which never load a zone, stay without it.
import _ "time/tzdata"
