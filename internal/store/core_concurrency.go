package store

import (
	"cmp"
	"slices"
	"strings"

	"github.com/allot-dev/allot/internal/rules"
)

// The concurrency rules' part of the reference semantics (see core.go),
// ported to lua/concurrency.lua. A concurrency key's state is its holders:
// the slots each node holds, what it would hold, and until when. Slots are
// whole numbers, so every count here is an int64, as exact in Lua.
//
// A node asks with the slots it keeps (kept, those in use among them) and
// the slots it would hold (want), both absolute: a request applied twice
// (its answer lost) means what it meant once. The store never records
// fewer slots for a node than it keeps, when it held that many: a slot in
// use is never lent twice while its holder's lease lasts. It lends at most
// the holders' fair shares, water-filled over their wants, out of what the
// others do not hold; a node above its share is told so (SlotShare) and
// gives slots back as they are released.
//
// A request may reach the store twice (a duplicate), or after a later one
// of its node (its sender timed out on it, and asked again): applied then,
// it would be weighed against the others' wants of the time, and record
// fewer slots than the node was told it holds by the answer it took (the
// simulator's seeds 48736 and 48009: 51 of 50). So a node numbers its
// requests of a key (Seq, increasing), and a request numbered at or below
// the holder's last applied one is not applied: the same one again is
// answered with what the holder holds, an older one with nothing.
//
// A holder's slots are its own until its lease ends (until): then they are
// lent again, which is how a crashed node's slots come back within one TTL.
// A node that lost the allocator stops taking slots on the lease max_hold
// before it ends (rules.Rule.LeaseLife), so that its slots in use stay
// counted here for max_hold at least (docs/bounds.md, "Concurrency").

// slotState is a concurrency key's state.
type slotState struct {
	holders map[string]slotHolder
}

type slotHolder struct {
	held  int64 // slots held
	want  int64 // slots it would hold
	until int64 // µs its lease ends
	since int64 // µs it began to hold: the older holder wins a tie
	seq   int64 // its last applied request's Seq, 0: none
}

// acquire applies one node's request and sets the state's expiry.
func (s *slotState) acquire(r *rules.Rule, now int64, req *AcquireRequest, expires *int64) Lease {
	ttl := r.Lease.TTL.Microseconds()
	s.dropEnded(now)
	h, had := s.holders[req.Node]
	if had && req.Seq > 0 && req.Seq <= h.seq {
		return s.unapplied(r, now, req, h, expires)
	}
	kept := min(max(req.SlotsKept, 0), h.held)
	want := min(max(req.Want, kept), r.Lease.Max)
	others := int64(0)
	for n, o := range s.holders {
		if n != req.Node {
			others += o.held
		}
	}
	if !had {
		h.since = now
	}
	h.want = want
	share := s.share(r.Limit, req.Node, h)
	h.held = max(kept, min(want, r.Limit-others, share))
	h.until = now + ttl
	h.seq = max(req.Seq, 0)
	if h.held == 0 && want == 0 {
		delete(s.holders, req.Node)
	} else {
		s.holders[req.Node] = h
	}
	*expires = s.expiry(now)
	return Lease{Granted: h.held, Remaining: r.Limit - others - h.held, TTL: us(ttl), Holders: max(len(s.holders), 1),
		FallbackNodes: int64(max(len(s.holders), 1)), SlotShare: share}
}

// unapplied answers a request numbered at or below the holder's last
// applied one, and applies nothing: its duplicate is told what the holder
// holds (its sender may take this answer for the first's, lost), an older
// one nothing (its sender gave up on it before it sent the one applied).
func (s *slotState) unapplied(r *rules.Rule, now int64, req *AcquireRequest, h slotHolder, expires *int64) Lease {
	granted := int64(0)
	if req.Seq == h.seq {
		granted = h.held
	}
	others := int64(0)
	for n, o := range s.holders {
		if n != req.Node {
			others += o.held
		}
	}
	*expires = s.expiry(now)
	return Lease{Granted: granted, Remaining: max(r.Limit-others-h.held, 0), TTL: us(r.Lease.TTL.Microseconds()), Holders: len(s.holders),
		FallbackNodes: int64(len(s.holders)), SlotShare: s.share(r.Limit, req.Node, h)}
}

// release forgets the node's slots: it gave back all it held.
func (s *slotState) release(now int64, node string, expires *int64) {
	s.dropEnded(now)
	delete(s.holders, node)
	*expires = s.expiry(now)
}

// dropEnded forgets the holders whose lease has ended.
func (s *slotState) dropEnded(now int64) {
	for n, h := range s.holders {
		if h.until <= now {
			delete(s.holders, n)
		}
	}
}

// expiry is when the state may be forgotten: when its last lease ends.
func (s *slotState) expiry(now int64) int64 {
	x := now
	for _, h := range s.holders {
		x = max(x, h.until)
	}
	return x
}

// share is node's fair share of limit slots, with its holding me in place
// of its recorded one: the holders' wants water-filled, each wanting w
// getting min(w, level) for the highest whole level that fits, and what is
// left over going a slot each to those wanting more, in the order of
// slotFirst.
func (s *slotState) share(limit int64, node string, me slotHolder) int64 {
	type claim struct {
		node string
		h    slotHolder
	}
	cs := make([]claim, 0, len(s.holders)+1)
	cs = append(cs, claim{node, me})
	for n, h := range s.holders {
		if n != node && h.want > 0 {
			cs = append(cs, claim{n, h})
		}
	}
	slices.SortFunc(cs, func(a, b claim) int { return cmp.Compare(a.h.want, b.h.want) })
	left, i := limit, 0
	for ; i < len(cs); i++ {
		if n := int64(len(cs) - i); cs[i].h.want*n > left {
			break
		}
		if cs[i].node == node {
			return me.want
		}
		left -= cs[i].h.want
	}
	rest := cs[i:]
	level, extra := left/int64(len(rest)), left%int64(len(rest))
	slices.SortFunc(rest, func(a, b claim) int { return slotFirst(a.node, a.h, b.node, b.h) })
	for j, c := range rest {
		if c.node == node {
			if int64(j) < extra {
				return level + 1
			}
			return level
		}
	}
	return level // not reached: node is among the claims
}

// slotFirst orders holders for the slots left over by water-filling: the
// older holder first, then by node name. Neither moves at a renewal, so a
// fleet of equal wants keeps its shares where they are.
func slotFirst(an string, a slotHolder, bn string, b slotHolder) int {
	if a.since != b.since {
		return cmp.Compare(a.since, b.since)
	}
	return strings.Compare(an, bn)
}
