package rules

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func calendar(t *testing.T, u CalendarUnit, zone string) Calendar {
	t.Helper()
	c := Calendar{Unit: u, Zone: zone}
	if err := c.load(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCalendarWindows: each window runs from local midnight to local
// midnight, through months of 28, 29, 30 and 31 days and days of 23 and
// 25 hours.
func TestCalendarWindows(t *testing.T) {
	paris, ny := mustZone(t, "Europe/Paris"), mustZone(t, "America/New_York")
	tests := []struct {
		name       string
		unit       CalendarUnit
		zone       string
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		{"february of 28 days", Month, "", time.Date(2026, 2, 28, 23, 59, 59, 999999000, time.UTC),
			time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"february of 29 days", Month, "", time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
			time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		{"april of 30 days", Month, "", time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), 30 * 24 * time.Hour},
		{"december of 31 days, into the next year", Month, "", time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC),
			time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
		{"march in Paris: 31 days less the hour of the change", Month, "Europe/Paris", time.Date(2026, 3, 15, 0, 0, 0, 0, paris),
			time.Date(2026, 3, 1, 0, 0, 0, 0, paris), time.Date(2026, 4, 1, 0, 0, 0, 0, paris), 31*24*time.Hour - time.Hour},
		{"a day of 23 hours in New York", Day, "America/New_York", time.Date(2026, 3, 8, 12, 0, 0, 0, ny),
			time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23 * time.Hour},
		{"a day of 25 hours in New York", Day, "America/New_York", time.Date(2026, 11, 1, 1, 30, 0, 0, ny).Add(time.Hour), // the second 01:30
			time.Date(2026, 11, 1, 0, 0, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25 * time.Hour},
		{"a day whose midnight Santiago skips starts at 01:00", Day, "America/Santiago", time.Date(2026, 9, 6, 4, 30, 0, 0, time.UTC),
			time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC), time.Date(2026, 9, 7, 3, 0, 0, 0, time.UTC), 23 * time.Hour},
		{"and the day before keeps its last hour", Day, "America/Santiago", time.Date(2026, 9, 6, 3, 30, 0, 0, time.UTC),
			time.Date(2026, 9, 5, 4, 0, 0, 0, time.UTC), time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"an ISO week from Monday, across a month end", Week, "", time.Date(2026, 4, 2, 9, 0, 0, 0, time.UTC), // a Thursday
			time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 6, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"a Sunday ends its week", Week, "", time.Date(2026, 4, 5, 23, 0, 0, 0, time.UTC),
			time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 6, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"a leap year", Year, "", time.Date(2028, 7, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC), 366 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := calendar(t, tt.unit, tt.zone)
			start, end := c.Window(tt.at.UnixMicro())
			if start != tt.start.UnixMicro() || end != tt.end.UnixMicro() {
				t.Fatalf("Window(%v) = [%v, %v), want [%v, %v)", tt.at, time.UnixMicro(start), time.UnixMicro(end), tt.start, tt.end)
			}
			if got := time.Duration(end-start) * time.Microsecond; got != tt.length {
				t.Fatalf("window of %v, want %v", got, tt.length)
			}
			if got := c.Unit.nominal(); time.Duration(end-start)*time.Microsecond > got+time.Hour {
				t.Fatalf("window longer than its unit's nominal %v by more than an hour", got)
			}
		})
	}
}

// TestCalendarWindowsTile: over a few years of instants, in zones with and
// without clock changes (one that skips its midnight among them), every
// window holds its instant, and a window's end is the next one's start.
func TestCalendarWindowsTile(t *testing.T) {
	for _, zone := range []string{"UTC", "Europe/Paris", "America/New_York", "America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata"} {
		for u := Day; u <= Year; u++ {
			c := calendar(t, u, zone)
			at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			stop := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
			step := int64(7 * time.Hour / time.Microsecond) // meets every hour of the day over the years
			prevStart, prevEnd := c.Window(at)
			for ; at < stop; at += step {
				start, end := c.Window(at)
				if start > at || at >= end {
					t.Fatalf("%v: Window(%v) = [%v, %v) does not hold it", c, time.UnixMicro(at), time.UnixMicro(start), time.UnixMicro(end))
				}
				if start != prevStart && start != prevEnd {
					t.Fatalf("%v: window [%v, %v) does not follow [%v, %v)", c, time.UnixMicro(start), time.UnixMicro(end), time.UnixMicro(prevStart), time.UnixMicro(prevEnd))
				}
				prevStart, prevEnd = start, end
			}
		}
	}
}

func TestCalendarBounds(t *testing.T) {
	c := calendar(t, Month, "Europe/Paris")
	paris := c.loc
	at := time.Date(2026, 3, 29, 3, 0, 0, 0, paris).UnixMicro() // the day the clocks go forward
	got := c.Bounds(at)
	want := [4]int64{}
	for i, m := range []time.Month{2, 3, 4, 5} {
		want[i] = time.Date(2026, m, 1, 0, 0, 0, 0, paris).UnixMicro()
	}
	if got != want {
		t.Fatalf("Bounds = %v, want %v", got, want)
	}
}

func TestParseCalendarRule(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
rules:
  - name: monthly
    algorithm: fixed_window
    limit: 10000
    period: month
    time_zone: Europe/Paris
  - name: daily
    algorithm: fixed_window
    limit: 1000
    period: day
    overrides:
      - key: big
        limit: 5000
`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Get("monthly")
	if !m.IsCalendar() || m.Calendar.String() != "month Europe/Paris" || m.Period != 31*24*time.Hour || !m.Strict || m.Leasable() {
		t.Fatalf("monthly = %+v: want a strict calendar month of nominal 744h", *m)
	}
	d, _ := s.Get("daily")
	if d.Calendar.String() != "day UTC" || d.Period != 24*time.Hour {
		t.Fatalf("daily = %+v", *d)
	}
	if o := d.ForKey("big"); o.Limit != 5000 || o.Calendar.String() != "day UTC" || !o.Strict {
		t.Fatalf("override = %+v, want the calendar of its rule", *o)
	}
	// The version follows the calendar's zone.
	const zoned = `
rules:
  - name: monthly
    algorithm: fixed_window
    limit: 10000
    period: month
    time_zone: ZONE
`
	berlin, err := Parse("t.yaml", []byte(strings.Replace(zoned, "ZONE", "Europe/Berlin", 1)))
	if err != nil {
		t.Fatal(err)
	}
	paris, err := Parse("t.yaml", []byte(strings.Replace(zoned, "ZONE", "Europe/Paris", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if berlin.Version() == paris.Version() {
		t.Fatal("a change of time zone keeps the rules version")
	}
}

// TestCalendarRuleErrors: each names the file, the line, the rule and the
// field.
func TestCalendarRuleErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"bad zone", `
rules:
  - name: m
    algorithm: fixed_window
    limit: 10
    period: month
    time_zone: Mars/Olympus`, `t.yaml:7: rule "m": field time_zone: unknown time zone "Mars/Olympus"`},
		{"the host's zone", `
rules:
  - name: m
    algorithm: fixed_window
    limit: 10
    period: month
    time_zone: Local`, `t.yaml:7: rule "m": field time_zone: "Local" names the host's zone`},
		{"a token bucket", `
rules:
  - name: tb
    algorithm: token_bucket
    limit: 10
    period: day`, `t.yaml:6: rule "tb": field period: day is a calendar period, for fixed_window rules: a token_bucket refills at a rate`},
		{"a sliding window", `
rules:
  - name: sw
    algorithm: sliding_window
    limit: 10
    period: month`, `t.yaml:6: rule "sw": field period: month is a calendar period, for fixed_window rules: a sliding_window weighs`},
		{"a sliding log", `
rules:
  - name: sl
    algorithm: sliding_log
    limit: 10
    period: week`, `t.yaml:6: rule "sl": field period: week is a calendar period`},
		{"a zone without a calendar", `
rules:
  - name: w
    algorithm: fixed_window
    limit: 10
    period: 24h
    time_zone: Europe/Paris`, `t.yaml:7: rule "w": field time_zone: is for calendar periods`},
		{"a misspelt unit", `
rules:
  - name: w
    algorithm: fixed_window
    limit: 10
    period: monthly`, `t.yaml:6: rule "w": field period: must be a duration such as 1s, 1m or 1h, got "monthly", or a calendar period: day, week, month or year`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.doc))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to start with %s", err, tt.want)
			}
		})
	}
}

// TestCalendarRuleReachesNodesStrict: GetRules carries a calendar rule as
// what the nodes can hold of it, a strict fixed window of its nominal
// period, which they send to the allocator for every request.
func TestCalendarRuleReachesNodesStrict(t *testing.T) {
	s, err := Parse("t.yaml", []byte(`
rules:
  - name: m
    algorithm: fixed_window
    limit: 10
    period: month
    time_zone: Asia/Tokyo
`))
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromProto(s.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := back.Get("m")
	if !r.Strict || r.Leasable() || r.Period != 31*24*time.Hour || r.Algorithm != FixedWindow {
		t.Fatalf("on a node: %+v, want a strict fixed window of 744h", *r)
	}
}
