package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// TestGubernator checks the bench's encoding of Gubernator's messages
// against real daemons: it builds bench/gubernator, starts the three
// daemons and spends a small bucket through each behaviour. It runs only
// with ALLOT_BENCH_GUBERNATOR=1: the first build compiles Gubernator and
// its dependencies, minutes on a small machine, too long and too
// dependent on the network for make test.
func TestGubernator(t *testing.T) {
	if os.Getenv("ALLOT_BENCH_GUBERNATOR") == "" {
		t.Skip("set ALLOT_BENCH_GUBERNATOR=1 to build and run Gubernator's daemons")
	}
	bin, err := buildGubernator(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g, err := startGubernator(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer g.kill()
	// 10 an hour with a burst of 10: Gubernator's limit 10 per hour, so
	// that nothing refills during the test, however slow the machine.
	r := &rules.Rule{Name: "t", Algorithm: rules.TokenBucket, Limit: 10, Period: time.Hour, Burst: 10}
	if limit, duration, burst := gubernatorLimit(r); limit != 10 || duration != 3600_000 || burst != 10 {
		t.Fatalf("gubernatorLimit = %d, %dms, %d; want 10, 3600000ms, 10", limit, duration, burst)
	}
	r.Limit, r.Period, r.Burst = 20000, time.Second, 5000 // the limit follows the burst
	if limit, duration, burst := gubernatorLimit(r); limit != 5000 || duration != 250 || burst != 5000 {
		t.Fatalf("gubernatorLimit = %d, %dms, %d; want 5000, 250ms, 5000", limit, duration, burst)
	}
	r.Limit, r.Period, r.Burst = 10, time.Hour, 10
	ctx := context.Background()
	spend := func(s *gubernatorLimiter, key string, calls int) (admitted int) {
		for i := range calls {
			if ok, _ := s.decide(ctx, i%gubernatorDaemons, key); ok {
				admitted++
			}
		}
		return admitted
	}
	for _, alg := range []gubernatorAlgorithm{gubernatorLeakyBucket, gubernatorTokenBucket} {
		// Forwarded to the key's owner, every decision is the owner's: the
		// burst exactly, from any daemon.
		def, err := newGubernator(g, r, gubernatorDaemons, "test-default", alg, gubernatorBatching)
		if err != nil {
			t.Fatal(err)
		}
		key := "k" + time.Now().Format("150405.000000")
		if got := spend(def, key, 20); got != 10 {
			t.Errorf("algorithm %d, default behaviour: %d of 20 admitted at once, want 10", alg, got)
		}
		if def.errs.Load() != 0 {
			t.Errorf("algorithm %d: %d failed calls, the first: %v", alg, def.errs.Load(), def.first)
		}
		def.close()
		// GLOBAL answers from each daemon's copy: at least the burst, and
		// more while the copies do not know of each other's hits (about a
		// burst per daemon at first), but not everything.
		glob, err := newGubernator(g, r, gubernatorDaemons, "test-global", alg, gubernatorGlobal)
		if err != nil {
			t.Fatal(err)
		}
		if got := spend(glob, key, 60); got < 10 || got >= 60 {
			t.Errorf("algorithm %d, GLOBAL: %d of 60 admitted at once, want 10 to 59", alg, got)
		} else {
			t.Logf("algorithm %d, GLOBAL: %d of 60 admitted at once", alg, got)
		}
		if glob.errs.Load() != 0 {
			t.Errorf("algorithm %d: %d failed calls, the first: %v", alg, glob.errs.Load(), glob.first)
		}
		glob.close()
	}
	if g.cpuSeconds() <= 0 {
		t.Error("no CPU time read for the daemons")
	}
}
