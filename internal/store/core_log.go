package store

import (
	"sort"

	"github.com/allot-dev/allot/internal/rules"
)

// The sliding log's part of the reference semantics (see core.go).

// slidingLog is a sliding log's state: the admitted requests, oldest
// first. A token counts while its entry is younger than the period.
type slidingLog struct {
	entries []logEntry
}

// logEntry is one admitted request of a sliding log: n tokens stamped at.
// last numbers its last token: the log numbers its tokens on from 1 since
// it was last empty, so that the tokens between two entries, and the entry
// that holds the k-th oldest token, are found without walking the entries
// between. A request costs one entry whatever its cost: a log never holds
// more entries than tokens.
type logEntry struct{ at, n, last int64 }

// reportLog logs consumption admitted age ago: an entry still inside the
// period, stamped no earlier than the newest, up to the limit.
func (st *state) reportLog(r *rules.Rule, now int64, req *AcquireRequest) {
	p := periodUS(r)
	st.log.drop(now - p)
	if at := now - req.ConsumedAge.Microseconds(); at > now-p && req.Consumed > 0 {
		if add := min(req.Consumed, r.Limit-st.log.count()); add > 0 {
			st.log.add(at, add)
		}
	}
	st.log.settle(r, now, req.Settled)
	st.expires = st.log.expiry(now, p)
}

// count is the number of tokens in the log.
func (l *slidingLog) count() int64 {
	if len(l.entries) == 0 {
		return 0
	}
	first, newest := l.entries[0], l.entries[len(l.entries)-1]
	return newest.last - (first.last - first.n)
}

// add logs n tokens at, or at the newest entry's stamp if that is later:
// after the store's clock steps back, entries must not leave the log early
// (and stamps ascend with token numbers, as drop needs).
func (l *slidingLog) add(at, n int64) {
	e := logEntry{at: at, n: n, last: n}
	if k := len(l.entries); k > 0 {
		e.at = max(at, l.entries[k-1].at)
		e.last += l.entries[k-1].last
	}
	l.entries = append(l.entries, e)
}

// drop forgets the entries stamped at or before cutoff, subtracting their
// tokens. Stamps ascend, so they are a prefix, found by bisection (the
// script gallops then bisects over ranks): each entry leaves once, and a
// call reads O(log n) entries.
func (l *slidingLog) drop(cutoff int64) {
	n := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].at > cutoff })
	l.entries = l.entries[n:]
	if len(l.entries) == 0 {
		l.entries = nil // an idle key keeps no array
	}
}

// stampOf is the stamp of the log's k-th oldest token (1-based, at most the
// count): the stamp of the first entry whose last token is numbered at least
// the oldest token's number plus k-1.
func (l *slidingLog) stampOf(k int64) int64 {
	want := l.entries[0].last - l.entries[0].n + k
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].last >= want })
	return l.entries[i].at
}

// expiry is when the log is empty: its newest entry leaves a period after
// it was stamped (now + the period when it is empty already).
func (l *slidingLog) expiry(now, p int64) int64 {
	if k := len(l.entries); k > 0 {
		return l.entries[k-1].at + p
	}
	return now + p
}

// checkLog keeps one entry per admitted request, with its cost.
func (st *state) checkLog(r *rules.Rule, now, cost int64) Decision {
	p := periodUS(r)
	st.log.drop(now - p)
	d := Decision{Limit: r.Limit}
	n := st.log.count()
	if n+cost <= r.Limit {
		if cost > 0 {
			st.log.add(now, cost)
		}
		d.Allowed = true
	} else {
		// When the oldest tokens that must leave for cost to fit have left.
		d.RetryAfter = us(st.log.stampOf(n+cost-r.Limit) + p - now)
	}
	d.Remaining = r.Limit - st.log.count()
	st.expires = st.log.expiry(now, p)
	if len(st.log.entries) > 0 {
		d.ResetAfter = us(st.expires - now)
	}
	return d
}
