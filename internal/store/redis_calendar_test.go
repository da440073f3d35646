package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Calendar windows on Redis: the script finds the store's window among the
// boundaries Go computed (redis.go's ruleArgs), and must decide as the
// memory store, which asks rules.Calendar directly.

func calendarRules(t *testing.T) []*rules.Rule {
	t.Helper()
	cal := func(name string, unit rules.CalendarUnit, zone string, limit int64) *rules.Rule {
		return newRule(t, rules.Rule{Name: name, Algorithm: rules.FixedWindow, Limit: limit,
			Calendar: rules.Calendar{Unit: unit, Zone: zone}, Lease: rules.LeaseTuning{TTL: hour}})
	}
	return []*rules.Rule{
		cal("month-utc", rules.Month, "", 12),
		cal("day-ny", rules.Day, "America/New_York", 6),
		cal("week-paris", rules.Week, "Europe/Paris", 9),
		cal("month-paris", rules.Month, "Europe/Paris", 7),
		cal("year-auckland", rules.Year, "Pacific/Auckland", 20),
	}
}

// TestRedisMatchesMemoryOnCalendars runs both stores on one fake clock
// through month ends of 28, 29, 30 and 31 days and the clock changes of
// New York and Paris, stepping back now and then across a boundary, with
// checks and fallback reports on calendar rules (and, in the same batches,
// on a fixed window of a duration): every number must match.
func TestRedisMatchesMemoryOnCalendars(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	clk := clock.NewFake(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { mem.Close() })
	red := fakeClockRedis(t, redistest.URL(t), clk)
	cals := calendarRules(t)
	plain := newRule(t, rules.Rule{Name: "plain", Algorithm: rules.FixedWindow, Limit: 8, Period: time.Minute, Strict: true,
		Lease: rules.LeaseTuning{TTL: hour}})
	ny, _ := time.LoadLocation("America/New_York")
	paris, _ := time.LoadLocation("Europe/Paris")
	utc := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	anchors := []time.Time{
		utc(2027, 2, 1),                             // after 31 days
		utc(2027, 3, 1),                             // after 28
		time.Date(2027, 3, 14, 2, 0, 0, 0, ny),      // New York springs forward
		time.Date(2027, 3, 15, 0, 0, 0, 0, ny),      // after a day of 23 hours
		time.Date(2027, 3, 28, 2, 0, 0, 0, paris),   // Paris springs forward
		time.Date(2027, 3, 29, 0, 0, 0, 0, paris),   // a Monday: a week of 167 hours ends
		time.Date(2027, 4, 1, 0, 0, 0, 0, paris),    // a month of 31 days less an hour
		utc(2027, 5, 1),                             // after 30
		time.Date(2027, 10, 31, 3, 0, 0, 0, paris),  // Paris falls back
		time.Date(2027, 11, 1, 0, 0, 0, 0, paris),   // after a month of 31 days and an hour
		time.Date(2027, 11, 7, 1, 30, 0, 0, ny),     // New York falls back
		time.Date(2027, 11, 8, 0, 0, 0, 0, ny),      // after a day of 25 hours
		time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC), // a year in UTC; Auckland's began 13 hours before
		utc(2028, 3, 1),                             // after 29
	}
	ctx := context.Background()
	key := func() string { return "k" + strconv.Itoa(rng.IntN(2)) }
	refused := 0
	for _, at := range anchors {
		if d := at.Add(-time.Minute).Sub(clk.Now()); d > 0 {
			clk.Advance(d)
		}
		for step := 0; step < 40 || !clk.Now().After(at.Add(time.Minute)); step++ {
			switch n := rng.IntN(10); {
			case n < 6:
				clk.Advance(time.Duration(rng.Int64N(int64(6 * time.Second))))
			case n == 6:
				clk.Advance(-time.Duration(rng.Int64N(int64(4 * time.Second))))
			}
			var memOut, redOut string
			var memErr, redErr error
			if rng.IntN(4) == 0 {
				var reqs []store.AcquireRequest
				for range 1 + rng.IntN(3) {
					r := cals[rng.IntN(len(cals))]
					if rng.IntN(4) == 0 {
						r = plain
					}
					reqs = append(reqs, store.AcquireRequest{Rule: r, Key: key(), Node: "n" + strconv.Itoa(rng.IntN(2)),
						Consumed: rng.Int64N(5), ConsumedAge: time.Duration(rng.Int64N(int64(5 * time.Minute)))})
				}
				ml, err := mem.Acquire(ctx, reqs)
				memOut, memErr = strconv.Quote(fmtLeases(ml)), err
				rl, err := red.Acquire(ctx, reqs)
				redOut, redErr = strconv.Quote(fmtLeases(rl)), err
			} else {
				r := cals[rng.IntN(len(cals))]
				k, cost := key(), 1+rng.Int64N(3)
				md, err := mem.Check(ctx, r, k, cost)
				memOut, memErr = fmtDecision(md), err
				rd, err := red.Check(ctx, r, k, cost)
				redOut, redErr = fmtDecision(rd), err
				if !md.Allowed {
					refused++
				}
			}
			if memErr != nil || redErr != nil {
				t.Fatalf("%v step %d: memory %v, redis %v", at, step, memErr, redErr)
			}
			if memOut != redOut {
				t.Fatalf("%v step %d at %v differs (seed %d):\nmemory %s\nredis  %s", at, step, clk.Now().Format(time.StampMicro), seed, memOut, redOut)
			}
		}
	}
	if refused == 0 {
		t.Fatal("no check was refused: the walk tests nothing of the limits")
	}
}

func fmtLeases(ls []store.Lease) string {
	out := ""
	for _, l := range ls {
		out += strconv.FormatInt(l.Granted, 10) + "/" + strconv.FormatInt(l.Remaining, 10) + "/" + l.TTL.String() + " "
	}
	return out
}

func fmtDecision(d store.Decision) string {
	return strconv.FormatBool(d.Allowed) + " " + strconv.FormatInt(d.Remaining, 10) + " " + d.RetryAfter.String() + " " + d.ResetAfter.String()
}

// TestRedisCalendarClockSkew: Redis' clock may be up to a period from the
// allocator's either way and decide as its own clock says; beyond, a call
// is refused whole, as unavailable, with nothing of it applied.
func TestRedisCalendarClockSkew(t *testing.T) {
	url := redistest.URL(t)
	redisClock := clock.NewFake(time.Date(2027, 5, 31, 23, 0, 0, 0, time.UTC))
	allocClock := clock.NewFake(redisClock.Now().Add(23 * time.Hour)) // already June by its clock
	s := fakeClockRedisWith(t, url, redisClock, allocClock)
	ctx := context.Background()
	month := newRule(t, rules.Rule{Name: "skew", Algorithm: rules.FixedWindow, Limit: 2, Calendar: rules.Calendar{Unit: rules.Month}})
	d, err := s.Check(ctx, month, "k", 2)
	if err != nil || !d.Allowed || d.ResetAfter != time.Hour {
		t.Fatalf("check %+v, %v: want allowed in May, an hour from its end by Redis' clock", d, err)
	}
	day := newRule(t, rules.Rule{Name: "skew-day", Algorithm: rules.FixedWindow, Limit: 2, Calendar: rules.Calendar{Unit: rules.Day}})
	allocClock.Advance(26 * time.Hour) // two days ahead of Redis: beyond the windows sent
	plain := newRule(t, rules.Rule{Name: "skew-plain", Algorithm: rules.FixedWindow, Limit: 5, Period: 24 * time.Hour, Strict: true})
	_, err = s.Acquire(ctx, []store.AcquireRequest{
		{Rule: plain, Key: "k", Node: "n", Consumed: 3},
		{Rule: day, Key: "k", Node: "n", Consumed: 1},
	})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, store.ErrCalendarClock) {
		t.Fatalf("acquire with Redis a day and more behind: %v, want ErrCalendarClock and ErrUnavailable", err)
	}
	// The batch's other item was not applied: the window is whole.
	if d, err := s.Check(ctx, plain, "k", 1); err != nil || d.Remaining != 4 {
		t.Fatalf("check of the plain window %+v, %v: want 4 left, nothing of the refused batch applied", d, err)
	}
	if _, err := s.Check(ctx, day, "k", 1); !errors.Is(err, store.ErrCalendarClock) {
		t.Fatalf("check %v, want ErrCalendarClock", err)
	}
}
