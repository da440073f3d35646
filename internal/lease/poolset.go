package lease

// poolSet is a set of pools that gives its memory back as it empties: a Go
// map keeps the buckets of its busiest moment for good, which a node whose
// keys went idle would pay per key it once held (issue 9).
type poolSet struct {
	m    map[*Pool]struct{}
	peak int // the most pools held since the map was made
}

func newPoolSet() poolSet { return poolSet{m: make(map[*Pool]struct{})} }

func (s *poolSet) add(p *Pool) {
	s.m[p] = struct{}{}
	s.peak = max(s.peak, len(s.m))
}

func (s *poolSet) has(p *Pool) bool {
	_, ok := s.m[p]
	return ok
}

func (s *poolSet) remove(p *Pool) { delete(s.m, p) }

func (s *poolSet) len() int { return len(s.m) }

// minPoolSetPeak is the size below which a set is never rebuilt.
const minPoolSetPeak = 64

// compact rebuilds the map when it holds less than a quarter of its peak.
// It must not run inside a range over s.m: the range would go on over the
// old map.
func (s *poolSet) compact() {
	if s.peak <= minPoolSetPeak || len(s.m) >= s.peak/4 {
		return
	}
	m := make(map[*Pool]struct{}, len(s.m))
	for p := range s.m {
		m[p] = struct{}{}
	}
	s.m, s.peak = m, len(m)
}
