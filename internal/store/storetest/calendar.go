package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Calendar windows (rules.Calendar): a window runs from one local midnight
// to another whatever its length, its reset is the calendar's, a step of
// the clock back reopens nothing, and a limit changed mid-period keeps what
// was spent.

func calendarRule(t *testing.T, unit rules.CalendarUnit, zone string, limit int64) *rules.Rule {
	return rule(t, rules.Rule{Name: "cal", Algorithm: rules.FixedWindow, Limit: limit,
		Calendar: rules.Calendar{Unit: unit, Zone: zone}})
}

// goTo moves a fake store clock forward to at.
func goTo(t *testing.T, h Harness, at time.Time) {
	t.Helper()
	d := at.Sub(h.Now())
	if d < 0 {
		t.Fatalf("the clock reads %v, past %v", h.Now(), at)
	}
	h.Advance(t, d)
}

// checkWant checks cost 1 and compares the decision with what is wanted.
func checkWant(t *testing.T, s store.Store, r *rules.Rule, key string, allowed bool, remaining int64, reset time.Duration) store.Decision {
	t.Helper()
	d := check(t, s, r, key, 1)
	if d.Allowed != allowed || d.Remaining != remaining || d.ResetAfter != reset {
		t.Fatalf("check %+v, want allowed %v, remaining %d, reset after %v", d, allowed, remaining, reset)
	}
	if !allowed && d.RetryAfter != reset {
		t.Fatalf("refused with retry after %v, want the window's end, %v", d.RetryAfter, reset)
	}
	return d
}

// testCalendarCheck runs on every store, the real clocks' included: a
// month's window counts to the calendar's month end, as Redis TIME reads.
func testCalendarCheck(t *testing.T, h Harness) {
	s := h.New(t)
	r := calendarRule(t, rules.Month, "Pacific/Auckland", 2)
	check(t, s, r, "k", 1)
	check(t, s, r, "k", 1)
	d := check(t, s, r, "k", 1)
	_, end := r.Calendar.Window(time.Now().UnixMicro())
	want := time.Until(time.UnixMicro(end))
	if d.Allowed || d.Remaining != 0 || d.RetryAfter != d.ResetAfter {
		t.Fatalf("third check %+v, want refused until the window's end", d)
	}
	if h.Now != nil { // a fake clock: its own month
		_, end := r.Calendar.Window(h.Now().UnixMicro())
		want = time.UnixMicro(end).Sub(h.Now())
	}
	if diff := d.ResetAfter - want; diff < -time.Minute || diff > time.Minute {
		t.Fatalf("reset after %v, want the month's end in Auckland, %v away", d.ResetAfter, want)
	}
}

// testCalendarMonthEnds walks through the months of 2027 into 2028's
// February: 31, 28, 31, 30, ... and 29 days. Each window resets at its end
// to the microsecond, and says its whole length at its start.
func testCalendarMonthEnds(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	r := calendarRule(t, rules.Month, "", 3)
	lengths := map[int]bool{}
	for m := time.January; m <= 14; m++ {
		start := time.Date(2027, m, 1, 0, 0, 0, 0, time.UTC)
		end := time.Date(2027, m+1, 1, 0, 0, 0, 0, time.UTC)
		goTo(t, h, start)
		checkWant(t, s, r, "k", true, 2, end.Sub(start))
		goTo(t, h, end.Add(-time.Microsecond))
		checkWant(t, s, r, "k", true, 1, time.Microsecond)
		checkWant(t, s, r, "k", true, 0, time.Microsecond)
		checkWant(t, s, r, "k", false, 0, time.Microsecond)
		lengths[int(end.Sub(start).Hours()/24)] = true
	}
	for _, days := range []int{28, 29, 30, 31} {
		if !lengths[days] {
			t.Fatalf("no month of %d days walked through", days)
		}
	}
}

// testCalendarDST: in New York a day is 23 hours when the clocks go
// forward and 25 when they go back; a day's window is the local day.
// In Paris, March's window is 31 days less an hour.
func testCalendarDST(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day := calendarRule(t, rules.Day, "America/New_York", 2)
	forward := time.Date(2027, 3, 14, 0, 0, 0, 0, ny)
	goTo(t, h, forward)
	checkWant(t, s, day, "k", true, 1, 23*time.Hour)
	goTo(t, h, forward.Add(22*time.Hour)) // 23:00 local, the day's last hour
	checkWant(t, s, day, "k", true, 0, time.Hour)
	checkWant(t, s, day, "k", false, 0, time.Hour)
	goTo(t, h, forward.Add(23*time.Hour)) // the next local midnight
	checkWant(t, s, day, "k", true, 1, 24*time.Hour)

	back := time.Date(2027, 11, 7, 0, 0, 0, 0, ny)
	goTo(t, h, back.Add(24*time.Hour)) // 23:00 local: the day has an hour to go
	checkWant(t, s, day, "k", true, 1, time.Hour)
	checkWant(t, s, day, "k", true, 0, time.Hour)
	goTo(t, h, back.Add(25*time.Hour))
	checkWant(t, s, day, "k", true, 1, 24*time.Hour)

	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	month := calendarRule(t, rules.Month, "Europe/Paris", 1)
	march := time.Date(2028, 3, 1, 0, 0, 0, 0, paris)
	goTo(t, h, march)
	checkWant(t, s, month, "k", true, 0, 31*24*time.Hour-time.Hour)
	goTo(t, h, time.Date(2028, 4, 1, 0, 0, 0, 0, paris).Add(-time.Microsecond))
	checkWant(t, s, month, "k", false, 0, time.Microsecond)
	goTo(t, h, time.Date(2028, 4, 1, 0, 0, 0, 0, paris))
	checkWant(t, s, month, "k", true, 0, 30*24*time.Hour)
}

// testCalendarStepBack: a store clock stepped back across a month's start
// keeps the later month's count, and its reset, until it is past it again.
func testCalendarStepBack(t *testing.T, h Harness) {
	needFakeClock(t, h)
	if h.StepBack == nil {
		t.Skip("the store's clock cannot step back")
	}
	s := h.New(t)
	r := calendarRule(t, rules.Month, "", 1)
	march := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	goTo(t, h, march.Add(time.Second))
	checkWant(t, s, r, "k", true, 0, 31*24*time.Hour-time.Second)
	h.StepBack(t, 2*time.Second) // into February
	// Decided at March's start: full, until March's end.
	checkWant(t, s, r, "k", false, 0, 31*24*time.Hour)
	goTo(t, h, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC))
	checkWant(t, s, r, "k", true, 0, 30*24*time.Hour)
}

// testCalendarReport: what a node admitted on its fallback under a
// calendar rule (strict) is debited from the month it began in.
func testCalendarReport(t *testing.T, h Harness) {
	needFakeClock(t, h)
	s := h.New(t)
	r := calendarRule(t, rules.Month, "", 10)
	goTo(t, h, time.Date(2027, 6, 30, 23, 0, 0, 0, time.UTC))
	if _, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "n", Consumed: 4, ConsumedAge: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	checkWant(t, s, r, "k", true, 5, time.Hour)
	// Begun in June, reported in July: dropped with June.
	goTo(t, h, time.Date(2027, 7, 1, 0, 30, 0, 0, time.UTC))
	if _, err := s.Acquire(context.Background(), []store.AcquireRequest{{Rule: r, Key: "k", Node: "n", Consumed: 3, ConsumedAge: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	checkWant(t, s, r, "k", true, 9, 31*24*time.Hour-30*time.Minute)
}

// relimit is r with another limit, as a reload that changes only the
// limit makes it: same name, same window.
func relimit(t *testing.T, r *rules.Rule, limit int64) *rules.Rule {
	t.Helper()
	c := *r
	c.Limit, c.Burst, c.Lease.Min, c.Lease.Max = limit, 0, 0, 0
	if err := c.Normalize(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// testWindowLimitRaisedAndCut: a window keeps what it spent when its limit
// changes: a raise admits the difference at once, a cut nothing more until
// the spent count is under it. For fixed windows of a duration and of the
// calendar alike.
func testWindowLimitRaisedAndCut(t *testing.T, h Harness) {
	s := h.New(t)
	for _, r := range []*rules.Rule{
		windowRule(t, rules.FixedWindow, 10, slow),
		calendarRule(t, rules.Year, "Asia/Tokyo", 10),
	} {
		name := "duration"
		if r.IsCalendar() {
			name = "calendar"
		}
		t.Run(name, func(t *testing.T) {
			for range 8 {
				if d := check(t, s, r, "k", 1); !d.Allowed {
					t.Fatalf("check %+v, want allowed", d)
				}
			}
			cut := relimit(t, r, 5)
			if d := check(t, s, cut, "k", 1); d.Allowed || d.Remaining != 0 {
				t.Fatalf("after a cut to 5 of 8 spent: %+v, want refused", d)
			}
			raised := relimit(t, r, 12)
			for i := range 4 {
				if d := check(t, s, raised, "k", 1); !d.Allowed || d.Remaining != int64(3-i) {
					t.Fatalf("raised to 12, check %d: %+v, want allowed, %d left", i, d, 3-i)
				}
			}
			if d := check(t, s, raised, "k", 1); d.Allowed {
				t.Fatalf("raised to 12 with 12 spent: %+v, want refused", d)
			}
			if d := check(t, s, r, "k", 1); d.Allowed {
				t.Fatalf("back to 10 with 12 spent: %+v, want refused", d)
			}
		})
	}
}
