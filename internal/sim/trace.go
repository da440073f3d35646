package sim

import "strings"

// trace keeps a run's last events, for the account of a failing seed.
type trace struct {
	lines []string
	next  int
	full  bool
}

func newTrace(n int) *trace { return &trace{lines: make([]string, n)} }

func (t *trace) add(line string) {
	t.lines[t.next] = line
	t.next = (t.next + 1) % len(t.lines)
	if t.next == 0 {
		t.full = true
	}
}

func (t *trace) String() string {
	var b strings.Builder
	b.WriteString("  last events:\n")
	start := 0
	if t.full {
		start = t.next
	}
	for i := range len(t.lines) {
		l := t.lines[(start+i)%len(t.lines)]
		if l != "" {
			b.WriteString("    " + l + "\n")
		}
	}
	return b.String()
}
