package lease

// DebugCounts are temporary counters for investigation.
var DebugCounts struct{ Accrued, Overflow, Expired, OwedShare, Deposited, Settled float64 }
