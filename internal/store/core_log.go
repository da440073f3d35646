package store

import (
	"sort"

	"github.com/allot-dev/allot/internal/rules"
)

// The sliding log's part of the reference semantics (see core.go).

// reportLog logs consumption admitted age ago: an entry still inside the
// period, stamped no earlier than the newest, up to the limit.
func (st *state) reportLog(r *rules.Rule, now int64, req *AcquireRequest) {
	p := periodUS(r)
	st.dropLog(now - p)
	if at := now - req.ConsumedAge.Microseconds(); at > now-p && req.Consumed > 0 {
		if add := min(req.Consumed, r.Limit-st.logCount()); add > 0 {
			st.appendLog(at, add)
		}
	}
	st.settleLog(r, now, req.Settled)
	st.expires = now + p
	if len(st.log) > 0 {
		st.expires = st.log[len(st.log)-1].at + p
	}
}

// logEntry is one admitted request of a sliding log: n tokens stamped at.
// last numbers its last token: the log numbers its tokens on from 1 since
// it was last empty, so that the tokens between two entries, and the entry
// that holds the k-th oldest token, are found without walking the entries
// between. A request costs one entry whatever its cost: a log never holds
// more entries than tokens.
type logEntry struct{ at, n, last int64 }

// logCount is the number of tokens in the log.
func (st *state) logCount() int64 {
	if len(st.log) == 0 {
		return 0
	}
	first, newest := st.log[0], st.log[len(st.log)-1]
	return newest.last - (first.last - first.n)
}

// appendLog logs n tokens at, or at the newest entry's stamp if that is
// later: after the store's clock steps back, entries must not leave the log
// early (and stamps ascend with token numbers, as dropLog needs).
func (st *state) appendLog(at, n int64) {
	e := logEntry{at: at, n: n, last: n}
	if k := len(st.log); k > 0 {
		e.at = max(at, st.log[k-1].at)
		e.last += st.log[k-1].last
	}
	st.log = append(st.log, e)
}

// dropLog forgets the entries stamped at or before cutoff, subtracting
// their tokens. Stamps ascend, so they are a prefix, found by bisection
// (the script gallops then bisects over ranks): each entry leaves once, and
// a call reads O(log n) entries.
func (st *state) dropLog(cutoff int64) {
	drop := sort.Search(len(st.log), func(i int) bool { return st.log[i].at > cutoff })
	st.log = st.log[drop:]
	if len(st.log) == 0 {
		st.log = nil // an idle key keeps no array
	}
}

// stampOf is the stamp of the log's k-th oldest token (1-based, at most the
// count): the stamp of the first entry whose last token is numbered at least
// the oldest token's number plus k-1.
func (st *state) stampOf(k int64) int64 {
	want := st.log[0].last - st.log[0].n + k
	i := sort.Search(len(st.log), func(i int) bool { return st.log[i].last >= want })
	return st.log[i].at
}

// checkLog keeps one entry per admitted request, with its cost; a token
// counts while its entry is younger than the period.
func (st *state) checkLog(r *rules.Rule, now, cost int64) Decision {
	p := periodUS(r)
	st.dropLog(now - p)
	d := Decision{Limit: r.Limit}
	n := st.logCount()
	if n+cost <= r.Limit {
		if cost > 0 {
			st.appendLog(now, cost)
		}
		d.Allowed = true
	} else {
		// When the oldest tokens that must leave for cost to fit have left.
		d.RetryAfter = us(st.stampOf(n+cost-r.Limit) + p - now)
	}
	d.Remaining = r.Limit - st.logCount()
	st.expires = now + p
	if len(st.log) > 0 {
		newest := st.log[len(st.log)-1].at
		d.ResetAfter = us(newest + p - now)
		st.expires = newest + p
	}
	return d
}
