package rules

import (
	"fmt"
	"strings"
	"time"
)

// CalendarUnit is a period that follows the calendar: a day, an ISO week
// (Monday to Sunday), a month or a year, from local midnight to local
// midnight in the rule's time zone. Such periods differ in length (months
// of 28 to 31 days, days of 23 or 25 hours where the clocks change), so a
// calendar rule's windows are counted by their boundaries, not by
// floor(now/period).
type CalendarUnit int

// The calendar units; 0 is none (the period is a duration).
const (
	Day CalendarUnit = iota + 1
	Week
	Month
	Year
)

var calendarNames = map[CalendarUnit]string{Day: "day", Week: "week", Month: "month", Year: "year"}

func (u CalendarUnit) String() string {
	if s, ok := calendarNames[u]; ok {
		return s
	}
	return fmt.Sprintf("CalendarUnit(%d)", int(u))
}

// parseCalendarUnit reads a period's YAML spelling as a calendar unit; ok
// is false for anything else (a duration).
func parseCalendarUnit(s string) (CalendarUnit, bool) {
	for u, name := range calendarNames {
		if s == name {
			return u, true
		}
	}
	return 0, false
}

// nominal is a calendar unit's Period: its longest length in whole days.
// It serves what needs one length for the rule (its rate, the nodes'
// fallback windows, RateLimit-Policy's w); the store's windows are the
// calendar's own.
func (u CalendarUnit) nominal() time.Duration {
	day := 24 * time.Hour
	switch u {
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 31 * day
	}
	return 366 * day // = MaxPeriod
}

// Calendar is a rule's calendar period: a unit in a time zone. The zero
// value is none. Every calendar computation of Allot is Window's, so that
// the memory store, the boundaries the Redis store sends its scripts and
// the tests agree by construction.
type Calendar struct {
	Unit CalendarUnit
	// Zone is an IANA time zone name; "" is UTC.
	Zone string

	loc *time.Location // Zone, loaded by Normalize
}

// IsZero reports whether the rule's period is a duration.
func (c Calendar) IsZero() bool { return c.Unit == 0 }

// String is "month Europe/Paris"; it names the calendar in a rule's digest
// and in the store's keys, so that a change of either starts windows anew.
func (c Calendar) String() string {
	if c.IsZero() {
		return ""
	}
	return c.Unit.String() + " " + c.zoneName()
}

func (c Calendar) zoneName() string {
	if c.Zone == "" {
		return "UTC"
	}
	return c.Zone
}

// load resolves the zone. "Local" is refused: it would mean whatever zone
// each allocator's host is set to.
func (c *Calendar) load() error {
	if strings.EqualFold(c.Zone, "local") {
		return fmt.Errorf("%q names the host's zone, which may differ between allocators: give an IANA name such as Europe/Paris", c.Zone)
	}
	loc, err := time.LoadLocation(c.zoneName())
	if err != nil {
		return fmt.Errorf("unknown time zone %q: want an IANA name such as UTC, Europe/Paris or America/New_York", c.Zone)
	}
	c.loc = loc
	return nil
}

// Window is the calendar period holding the instant at, in µs since the
// Unix epoch: [start, end). Consecutive windows tile the time line: one's
// end is the next one's start.
func (c Calendar) Window(at int64) (start, end int64) {
	t := time.UnixMicro(at).In(c.location())
	y, m, d := c.first(t.Date())
	// The instants decide, not the local date: a period's start is not
	// always at its date's midnight (see at).
	start, end = c.at(y, m, d, 0), c.at(y, m, d, 1)
	for start > at {
		y, m, d = c.step(y, m, d, -1)
		start, end = c.at(y, m, d, 0), start
	}
	for end <= at {
		y, m, d = c.step(y, m, d, 1)
		start, end = end, c.at(y, m, d, 1)
	}
	return start, end
}

// Bounds are the boundaries of the window holding at and of the one on
// each side of it: four instants (µs), three windows. A store whose clock
// reads anything within them, however far it is from at, finds its window
// there.
func (c Calendar) Bounds(at int64) [4]int64 {
	start, end := c.Window(at)
	before, _ := c.Window(start - 1)
	_, after := c.Window(end)
	return [4]int64{before, start, end, after}
}

func (c Calendar) location() *time.Location {
	if c.loc == nil {
		return time.UTC // not normalized: a zone-less calendar is UTC's
	}
	return c.loc
}

// first is the local date on which the period holding the date y-m-d
// starts.
func (c Calendar) first(y int, m time.Month, d int) (int, time.Month, int) {
	switch c.Unit {
	case Week:
		wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()
		return norm(y, m, d-(int(wd)+6)%7) // ISO: weeks start on Monday
	case Month:
		return y, m, 1
	case Year:
		return y, time.January, 1
	}
	return y, m, d
}

// step is the first date of the period n periods after the one starting
// on y-m-d.
func (c Calendar) step(y int, m time.Month, d, n int) (int, time.Month, int) {
	switch c.Unit {
	case Week:
		return norm(y, m, d+7*n)
	case Month:
		return norm(y, m+time.Month(n), d)
	case Year:
		return y + n, m, d
	}
	return norm(y, m, d+n)
}

// at is the instant (µs) at which the period n periods after the one
// starting on y-m-d starts: local midnight of its first date, or, where
// the zone skips that midnight, the first instant of that date (the
// clocks' change). time.Date puts a skipped midnight on the previous
// date, by the offset after the change: the offset before it (which that
// instant still has) gives the change itself.
func (c Calendar) at(y int, m time.Month, d, n int) int64 {
	y, m, d = c.step(y, m, d, n)
	t := time.Date(y, m, d, 0, 0, 0, 0, c.location())
	if t.Day() != d {
		_, before := t.Zone()
		t = time.Unix(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()-int64(before), 0)
	}
	return t.UnixMicro()
}

// norm normalizes a date whose day or month is out of range.
func norm(y int, m time.Month, d int) (int, time.Month, int) {
	return time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
}
