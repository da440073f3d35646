package lease

// keySet is the keys the sweep visits: a slice, so that the visits come in
// an order of the Core's own making (a map's order is random, and a seeded
// Core must repeat itself), with each key's index kept in the key for O(1)
// removal. It gives its memory back as it empties.
type keySet struct {
	keys []*KeyLease
}

func (s *keySet) add(k *KeyLease) {
	if k.q.setIndex != 0 {
		return
	}
	s.keys = append(s.keys, k)
	k.q.setIndex = len(s.keys)
}

func (s *keySet) has(k *KeyLease) bool { return k.q.setIndex != 0 }

func (s *keySet) remove(k *KeyLease) {
	i := k.q.setIndex - 1
	if i < 0 {
		return
	}
	last := len(s.keys) - 1
	s.keys[i] = s.keys[last]
	s.keys[i].q.setIndex = i + 1
	s.keys[last] = nil
	s.keys = s.keys[:last]
	k.q.setIndex = 0
	// A set that held many keys and now holds few gives its array back.
	if c := cap(s.keys); c > minSetCap && len(s.keys) < c/4 {
		s.keys = append(make([]*KeyLease, 0, 2*len(s.keys)), s.keys...)
	}
}

func (s *keySet) len() int { return len(s.keys) }

// minSetCap is the array a set keeps however few keys it holds.
const minSetCap = 64
