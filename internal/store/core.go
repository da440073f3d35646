package store

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/allot-dev/allot/internal/rules"
)

// This file is the reference semantics of every store. Time is integer
// microseconds from the store's own clock (Redis TIME, or the memory store's
// injected clock), never the caller's. Token counts are float64, as in Redis
// Lua; the scripts in lua/ perform the same operations in the same order so
// that both stores reach the same numbers.

// state is one (rule, key). What a field holds depends on the algorithm.
type state struct {
	tokens  float64    // token bucket: tokens held; windows: count of the current window
	prev    float64    // sliding window: count of the previous window; token bucket: see belowSince
	stamp   int64      // token bucket: µs of the last refill; windows: the window index
	log     []logEntry // sliding log: the admitted requests, oldest first
	holders map[string]holder
	expires int64 // µs after which the state may be forgotten
}

type holder struct {
	until    int64   // µs
	want     int64   // tokens
	wantRate float64 // tokens per second the holder asked for as a share
	rate     float64 // tokens per second of the rule's rate lent until until
	seq      int64   // the holder's last applied request, 0: none
	granted  int64   // the tokens that request was granted
	// held is what the holder was lent in window epoch (0 for a token
	// bucket) and has not given back: the most it may give back, with what
	// its share earned since its last request.
	held  float64
	epoch int64
}

// newState is what a missing key means: a full bucket, an empty window.
// A bucket's state expires only once it is full, so a missing bucket is
// full; it counts as full for two lease TTLs (its stamp is that far back),
// which for a key never seen is short of the truth, and for one forgotten a
// moment ago is not: its last tokens came in while nobody asked for them
// (see fullness).
func newState(r *rules.Rule, now int64) *state {
	st := &state{}
	if r.Algorithm == rules.TokenBucket {
		st.tokens, st.stamp = float64(r.Burst), now-2*r.Lease.TTL.Microseconds()
	}
	return st
}

func periodUS(r *rules.Rule) int64 { return r.Period.Microseconds() }

// stateVariant is what, beyond the algorithm, makes a state meaningless
// under another version of its rule: a window's index counts periods, so a
// window whose period changes on reload starts afresh (kept, a longer
// period would put the stored index far in the future: a window that never
// ends, as the clock never passes it). A token bucket's state means the
// same whatever the rate.
func stateVariant(r *rules.Rule) string {
	if r.Algorithm == rules.FixedWindow || r.Algorithm == rules.SlidingWindow {
		return "@" + strconv.FormatInt(periodUS(r), 36)
	}
	return ""
}

func ratePerUS(r *rules.Rule) float64 { return float64(r.Limit) / float64(periodUS(r)) }

func us(d int64) time.Duration { return time.Duration(d) * time.Microsecond }

// maxWaitUS caps every computed wait and lifetime (~35.7 years). A token
// bucket with a large burst and a tiny rate (say burst 1e6, 1 token a year)
// would otherwise need more microseconds than an int64 holds: the conversion
// overflows to a negative expiry, the state resets on every call and the rule
// stops limiting. The cap also keeps every instant below 2^53, exact in Lua.
const maxWaitUS = 1 << 50

func ceilUS(f float64) int64 { return int64(math.Min(math.Ceil(f), maxWaitUS)) }

// ratePerSecond is the rule's rate in tokens per second, computed as the
// scripts compute it.
func ratePerSecond(r *rules.Rule) float64 { return float64(r.Limit) * 1e6 / float64(periodUS(r)) }

// refill adds what the central bucket earned since the last refill: the
// rule's rate, less the shares of it lent to holders, each until its lease
// ended. Shares never sum above the rate, so the bucket only grows over the
// interval and capping it at the end is exact. A clock that steps back
// earns nothing and does not move the stamp back.
//
// It returns how long the bucket has been full at now, in µs, as far as
// what it could not hold tells: the overflow at the part of the rate no
// share holds at now. Shares only end between two refills, so that part
// only grew over the interval, and the answer is never more than the
// truth. 0 when it is below capacity.
func (st *state) refill(r *rules.Rule, now int64) int64 {
	if now <= st.stamp {
		return 0
	}
	var lent []float64
	for _, h := range st.holders {
		if end := min(h.until, now); h.rate > 0 && end > st.stamp {
			lent = append(lent, h.rate*float64(end-st.stamp)/1e6)
		}
	}
	earned := float64(now-st.stamp)*ratePerUS(r) - sortedSum(lent)
	sum := st.tokens + math.Max(earned, 0)
	st.tokens = math.Min(float64(r.Burst), sum)
	full := int64(0)
	if over := sum - float64(r.Burst); over > 0 {
		full = now - st.stamp
		if free := ratePerUS(r) - st.lentRate(now)/1e6; free > 0 {
			full = int64(math.Min(math.Floor(over/free), float64(full)))
		}
	}
	if st.prev > 0 {
		st.prev += float64(now - st.stamp - full)
	}
	st.stamp = now
	return full
}

// A token bucket's prev is its belowSince: when positive, prev-1 is how
// many µs the bucket has been below capacity, at most, since it was last
// full for a whole lease TTL (or was missing). refill adds to it, fullness
// starts it afresh and drops it once it reaches a TTL. (It is p in the
// scripts' layout, which versions before it wrote as 0: nothing known.)

// fullness tells a holder's request how much of the rule's rate the bucket
// could not hold before the request arrived: it had been full for fullFor
// µs then (full, from refill), and for fullInTTL µs at least, in all, of
// the TTL before. While it was full, what a node's fallback share earned
// was refill the bucket lost, so the node may keep it; the rest of what the
// share admitted while the request was on its way the bucket earned too
// and lent to others, and the node owes it (lease.Manager.oweInFlight).
// Both are 0 when nothing is known. It also keeps belowSince.
func (st *state) fullness(full, ttl int64) (fullFor, fullInTTL int64) {
	switch {
	case full >= ttl:
		st.prev = 1
	case st.prev > 0 && int64(st.prev)-1 >= ttl:
		st.prev = 0
	}
	fullInTTL = full
	if st.prev > 0 {
		fullInTTL = max(fullInTTL, ttl-(int64(st.prev)-1))
	}
	return min(full, ttl), min(fullInTTL, ttl)
}

// sortedSum adds xs in ascending order, so that the scripts, which meet the
// holders in another order, reach the same float.
func sortedSum(xs []float64) float64 {
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum
}

// lentRate is the sum of the shares active at now, in tokens per second.
func (st *state) lentRate(now int64) float64 {
	var rates []float64
	for _, h := range st.holders {
		if h.rate > 0 && h.until > now {
			rates = append(rates, h.rate)
		}
	}
	return sortedSum(rates)
}

// refillWait is how long the central bucket takes to earn need tokens at
// the part of the rate no share holds; with all of it lent, the shares end
// or are renewed within a TTL, so it says a TTL plus the time at the full
// rate.
func (st *state) refillWait(r *rules.Rule, now, ttl int64, need float64) int64 {
	if need <= 0 {
		return 0
	}
	wait := float64(ttl) + need/ratePerUS(r)
	if free := ratePerUS(r) - st.lentRate(now)/1e6; free > 0 {
		wait = math.Min(wait, need/free)
	}
	return ceilUS(wait)
}

// roll moves a window state to the window holding now and returns that
// window's index and start, and the instant to decide at. A window never
// moves backwards: when the store's clock has stepped back before the
// state's window (a failover to a replica whose clock is behind), the state
// stays in its window and the decision is made at that window's start, so a
// full window stays full and a sliding window weighs its previous one in
// full, until the clock is past it again.
func (st *state) roll(r *rules.Rule, now int64) (epoch, start, at int64) {
	p := periodUS(r)
	epoch = max(now/p, st.stamp)
	if st.stamp != epoch {
		if r.Algorithm == rules.SlidingWindow && st.stamp == epoch-1 {
			st.prev = st.tokens
		} else {
			st.prev = 0
		}
		st.tokens, st.stamp = 0, epoch
	}
	start = epoch * p
	return epoch, start, max(now, start)
}

// estimate is the sliding window counter: the previous window weighted by
// how much of it the sliding window still covers, plus the current one.
func (st *state) estimate(r *rules.Rule, now, start int64) float64 {
	p := float64(periodUS(r))
	weight := (p - float64(now-start)) / p
	return st.prev*weight + st.tokens
}

// hold records node as a holder wanting want tokens and wantRate tokens per
// second until now+ttl, forgets expired holders, and returns the wants of
// the other active holders and the count. Its share, if any, is lendRate's.
func (st *state) hold(node string, want int64, wantRate float64, now, ttl int64, held float64, epoch int64) (others []int64, count int) {
	if st.holders == nil {
		st.holders = make(map[string]holder)
	}
	for n, h := range st.holders {
		if h.until <= now {
			delete(st.holders, n)
		} else if n != node {
			others = append(others, h.want)
		}
	}
	st.holders[node] = holder{until: now + ttl, want: want, wantRate: wantRate, held: held, epoch: epoch}
	return others, len(st.holders)
}

// givable is what node may give back at now of what it was lent in window
// epoch: its grants not given back yet, and what its share earned since
// its last request, while its lease lasts. A node that holds no lease gives
// back nothing: a Release or a return cannot credit tokens never lent.
func (st *state) givable(node string, now, ttl, epoch int64) float64 {
	h, ok := st.holders[node]
	if !ok || h.until <= now || h.epoch != epoch {
		return 0
	}
	return h.held + h.rate*float64(max(min(now, h.until)-(h.until-ttl), 0))/1e6
}

// giveBack credits what node returns, at most what it may give back, and
// returns what it may still give back.
func (st *state) giveBack(node string, now, ttl, epoch, tokens int64) (credited int64, left float64) {
	can := st.givable(node, now, ttl, epoch)
	credited = min(tokens, int64(math.Floor(can)))
	return credited, can - float64(credited)
}

// capConsumed bounds what a node reports as admitted without a lease by
// what its fallback share could have admitted since age ago: the burst and
// the rate divided over the key's holders, the node counted. No report can
// put another holder's key in debt beyond that.
func (st *state) capConsumed(r *rules.Rule, node string, now, consumed int64, age time.Duration) int64 {
	if consumed <= 0 {
		return 0
	}
	n := 1
	for h, o := range st.holders {
		if h != node && o.until > now {
			n++
		}
	}
	limit := float64(r.Capacity())/float64(n) + float64(age.Microseconds())*ratePerUS(r)/float64(n)
	return min(consumed, int64(math.Ceil(math.Min(limit, maxWaitUS))))
}

// lendRate lends node, which hold has just recorded, a share of the rule's
// rate for its lease: the water-filling level of the active holders' wanted
// rates, and never more than the other holders' shares leave, so that the
// shares sum to at most the rate at every instant (Doorman's rule: a holder
// whose fair share shrank keeps its old one until it renews, and the others
// grow as it does). A bucket in debt keeps back the part of its rate that
// repays the debt within a TTL.
func (st *state) lendRate(r *rules.Rule, node string, ttl int64) float64 {
	self := st.holders[node]
	if self.wantRate <= 0 {
		return 0
	}
	rate := ratePerSecond(r)
	avail := rate - math.Min(rate, math.Max(-st.tokens, 0)*1e6/float64(ttl))
	var wants, held []float64
	for n, h := range st.holders {
		wants = append(wants, h.wantRate)
		if n != node {
			held = append(held, h.rate)
		}
	}
	share := math.Min(self.wantRate, waterLevel(avail, wants))
	share = math.Max(math.Min(share, avail-sortedSum(held)), 0)
	self.rate = share
	st.holders[node] = self
	return share
}

// waterLevel is the level at which the wants, each capped at it, sum to
// avail: infinite when they all fit.
func waterLevel(avail float64, wants []float64) float64 {
	slices.Sort(wants)
	rem, n := avail, float64(len(wants))
	for _, w := range wants {
		if share := rem / n; w > share {
			return share
		}
		rem -= w
		n--
	}
	return math.Inf(1)
}

// fairGrant lends at most want and at most avail. When the holders together
// want more than avail, it water-fills: every holder may take up to the
// level at which the wants, each capped at the level, sum to avail. So a
// greedy node gets what the modest ones leave, never their share. A share
// that rounds to zero still lends one token, so a tiny limit spread over many
// holders cannot lock every one of them out.
func fairGrant(avail, want int64, others []int64) int64 {
	if want <= 0 || avail <= 0 {
		return 0
	}
	total := want
	for _, w := range others {
		total += w
	}
	if total <= avail {
		return want
	}
	wants := make([]float64, 0, len(others)+1)
	for _, w := range others {
		wants = append(wants, float64(w))
	}
	level := waterLevel(float64(avail), append(wants, float64(want)))
	g := min(want, int64(math.Floor(math.Min(level, float64(want)))))
	if g < 1 {
		g = 1
	}
	return g
}

// acquire grants one lease. consumed is debited first. A token bucket may go
// into debt of at most one capacity, less what it would have refilled since
// the consumption began (ConsumedAge): tokens admitted in fallback a second
// ago have been paid back by a second of refill, and charging them again in
// full would stall the key after every outage. A window's count may reach
// 2x its limit, or only the limit for consumption older than the window.
func (st *state) acquire(r *rules.Rule, now int64, req *AcquireRequest) Lease {
	ttl := r.Lease.TTL.Microseconds()
	if !r.Leasable() {
		return st.report(r, now, ttl, req)
	}
	if l, ok := st.replay(r, now, ttl, req); ok {
		return l
	}
	var l Lease
	switch r.Algorithm {
	case rules.TokenBucket:
		l = st.acquireBucket(r, now, ttl, req)
	default:
		l = st.acquireWindow(r, now, ttl, req)
	}
	if req.Seq > 0 {
		h := st.holders[req.Node]
		h.seq, h.granted = req.Seq, l.Granted
		st.holders[req.Node] = h
	}
	return l
}

// replay answers again the request a holder last sent, whose answer was
// lost: the same tokens and share, nothing applied twice (no consumption
// debited, no return credited, no grant), and the state left as it is.
// The lease's life runs from when the request was applied.
func (st *state) replay(r *rules.Rule, now, ttl int64, req *AcquireRequest) (Lease, bool) {
	h, ok := st.holders[req.Node]
	if req.Seq == 0 || !ok || h.seq != req.Seq || h.until <= now {
		return Lease{}, false
	}
	l := Lease{Granted: h.granted, Rate: h.rate, TTL: us(ttl)}
	for _, o := range st.holders {
		if o.until > now {
			l.Holders++
		}
	}
	applied := h.until - ttl
	switch r.Algorithm {
	case rules.TokenBucket:
		l.Remaining = int64(math.Floor(math.Max(st.tokens, 0)))
	default:
		p := periodUS(r)
		l.Epoch = applied / p
		l.Remaining = int64(math.Floor(math.Max(float64(r.Limit)-st.tokens, 0)))
		if r.Algorithm == rules.FixedWindow {
			// Tokens of a window die with it, counted from the apply.
			l.TTL = us(max(min(ttl, (l.Epoch+1)*p-applied), 0))
		}
	}
	return l, true
}

func (st *state) acquireBucket(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	capacity, rate := float64(r.Burst), ratePerUS(r)
	fullFor, fullInTTL := st.fullness(st.refill(r, now), ttl)
	credited, held := st.giveBack(req.Node, now, ttl, 0, req.Returned)
	st.tokens = math.Min(capacity, st.tokens+float64(credited))
	st.debitBucket(r, st.capConsumed(r, req.Node, now, req.Consumed, req.ConsumedAge), req.ConsumedAge)
	others, holders := st.hold(req.Node, req.Want, req.WantRate, now, ttl, held, 0)
	g := fairGrant(int64(math.Floor(math.Max(st.tokens, 0))), req.Want, others)
	st.tokens -= float64(g)
	st.lent(req.Node, g)
	l := Lease{Granted: g, TTL: us(ttl), Holders: holders, Rate: st.lendRate(r, req.Node, ttl),
		FullFor: us(fullFor), FullInTTL: us(fullInTTL)}
	l.Remaining = int64(math.Floor(math.Max(st.tokens, 0)))
	if g < req.Want {
		need := math.Min(float64(req.Want-g), capacity)
		if st.tokens < need {
			l.RetryAfter = us(st.refillWait(r, now, ttl, need-st.tokens))
		}
	}
	// Every share ends within a TTL; from then on the bucket refills at the
	// full rate.
	st.expires = now + ceilUS((capacity-st.tokens)/rate) + ttl
	return l
}

func (st *state) acquireWindow(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	limit, p := float64(r.Limit), periodUS(r)
	epoch, start, at := st.roll(r, now)
	// What the holder was lent in an ended window is gone with it: it may
	// give back only what it was lent in this one.
	credited, _ := st.giveBack(req.Node, now, ttl, req.ReturnedEpoch, req.Returned)
	st.credit(r, epoch, credited, req.ReturnedEpoch)
	held := st.givable(req.Node, now, ttl, epoch)
	if req.ReturnedEpoch == epoch {
		held -= float64(credited)
	}
	st.debitWindow(r, st.capConsumed(r, req.Node, now, req.Consumed, req.ConsumedAge), req.ConsumedAge)
	others, holders := st.hold(req.Node, req.Want, req.WantRate, now, ttl, held, epoch)
	used := st.tokens
	if r.Algorithm == rules.SlidingWindow {
		used = st.estimate(r, at, start)
	}
	g := fairGrant(int64(math.Floor(math.Max(limit-used, 0))), req.Want, others)
	st.tokens += float64(g)
	st.lent(req.Node, g)
	l := Lease{Granted: g, TTL: us(ttl), Holders: holders, Epoch: epoch}
	l.Remaining = int64(math.Floor(math.Max(limit-used-float64(g), 0)))
	end := start + p
	if r.Algorithm == rules.FixedWindow {
		// Tokens of a window die with it: the window never exceeds its limit.
		l.TTL = us(min(ttl, end-at))
		if g < req.Want && l.Remaining == 0 {
			l.RetryAfter = us(end - at)
		}
		st.expires = end + ttl
		return l
	}
	if g < req.Want {
		l.RetryAfter = us(st.slidingRetry(r, at, start, min(req.Want-g, r.Limit)))
	}
	st.expires = start + 2*p + ttl
	return l
}

// debitBucket takes tokens admitted outside the allocator out of a refilled
// bucket, into a debt of at most one capacity less what refilling has
// repaid since they were admitted (age).
func (st *state) debitBucket(r *rules.Rule, consumed int64, age time.Duration) {
	capacity := float64(r.Burst)
	repaid := float64(age.Microseconds()) * ratePerUS(r)
	floor := math.Min(st.tokens, -math.Max(capacity-repaid, 0))
	st.tokens = math.Max(st.tokens-float64(consumed), floor)
}

// debitWindow adds tokens admitted outside the allocator to a rolled
// window's count: up to twice the limit, or up to the limit only for
// consumption older than a window.
func (st *state) debitWindow(r *rules.Rule, consumed int64, age time.Duration) {
	limit := float64(r.Limit)
	ceiling := 2 * limit
	if age.Microseconds() >= periodUS(r) {
		ceiling = math.Max(st.tokens, limit)
	}
	st.tokens = math.Min(st.tokens+float64(consumed), ceiling)
}

// report debits what a node admitted under a strict rule from its fallback
// share while the allocator could not decide: nothing is lent, the node is
// not counted as a holder, and the debit is bounded as an Acquire's
// consumed is (a log takes entries up to its limit).
func (st *state) report(r *rules.Rule, now, ttl int64, req *AcquireRequest) Lease {
	l := Lease{TTL: us(ttl)}
	switch r.Algorithm {
	case rules.TokenBucket:
		st.refill(r, now)
		st.debitBucket(r, req.Consumed, req.ConsumedAge)
		l.Remaining = int64(math.Floor(math.Max(st.tokens, 0)))
		st.expires = now + ceilUS((float64(r.Burst)-st.tokens)/ratePerUS(r)) + ttl
	case rules.SlidingLog:
		st.reportLog(r, now, req)
		l.Remaining = r.Limit - st.logCount()
	default:
		_, start, _ := st.roll(r, now)
		st.debitWindow(r, req.Consumed, req.ConsumedAge)
		l.Remaining = int64(math.Floor(math.Max(float64(r.Limit)-st.tokens, 0)))
		st.expires = start + 2*periodUS(r) + ttl
		if r.Algorithm == rules.FixedWindow {
			st.expires = start + periodUS(r) + ttl
		}
	}
	return l
}

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

// slidingRetry is how long until a sliding window admits cost more tokens.
func (st *state) slidingRetry(r *rules.Rule, now, start, cost int64) int64 {
	limit, p := float64(r.Limit), float64(periodUS(r))
	room := limit - float64(cost) - st.tokens
	if room >= 0 {
		if st.prev <= room {
			return 0
		}
		// The previous window's weight must fall to room/prev.
		at := float64(start) + p*(1-room/st.prev)
		return max(0, ceilUS(at-float64(now)))
	}
	// Wait for this window to become the previous one and fade enough.
	at := float64(start) + p + p*(1-(limit-float64(cost))/st.tokens)
	return max(0, ceilUS(at-float64(now)))
}

// release credits returned tokens (never above capacity, never into a window
// that has ended) and forgets the node as a holder, ending its share: the
// refill first counts the share up to now.
func (st *state) release(r *rules.Rule, now int64, ret *Return) {
	ttl := r.Lease.TTL.Microseconds()
	switch r.Algorithm {
	case rules.TokenBucket:
		st.refill(r, now)
		credited, _ := st.giveBack(ret.Node, now, ttl, 0, ret.Tokens)
		delete(st.holders, ret.Node)
		st.tokens = math.Min(float64(r.Burst), st.tokens+float64(credited))
	case rules.FixedWindow, rules.SlidingWindow:
		credited, _ := st.giveBack(ret.Node, now, ttl, ret.Epoch, ret.Tokens)
		delete(st.holders, ret.Node)
		epoch, _, _ := st.roll(r, now)
		st.credit(r, epoch, credited, ret.Epoch)
	}
}

// lent adds a grant to what the holder may give back.
func (st *state) lent(node string, g int64) {
	h := st.holders[node]
	h.held += float64(g)
	st.holders[node] = h
}

// credit takes n tokens of the window of index from back out of a window
// state whose current index is epoch: only while that window still counts.
func (st *state) credit(r *rules.Rule, epoch, n, from int64) {
	switch from {
	case epoch:
		st.tokens = math.Max(st.tokens-float64(n), 0)
	case epoch - 1:
		if r.Algorithm == rules.SlidingWindow {
			st.prev = math.Max(st.prev-float64(n), 0)
		}
	}
}

// check decides one request of cost tokens, which the caller has checked
// against the capacity.
func (st *state) check(r *rules.Rule, now, cost int64) Decision {
	switch r.Algorithm {
	case rules.TokenBucket:
		return st.checkBucket(r, now, cost)
	case rules.SlidingLog:
		return st.checkLog(r, now, cost)
	default:
		return st.checkWindow(r, now, cost)
	}
}

func (st *state) checkBucket(r *rules.Rule, now, cost int64) Decision {
	capacity, rate := float64(r.Burst), ratePerUS(r)
	st.refill(r, now)
	d := Decision{Limit: r.Limit}
	if st.tokens >= float64(cost) {
		st.tokens -= float64(cost)
		d.Allowed = true
	} else {
		d.RetryAfter = us(st.refillWait(r, now, r.Lease.TTL.Microseconds(), float64(cost)-st.tokens))
	}
	d.Remaining = int64(math.Floor(math.Max(st.tokens, 0)))
	d.ResetAfter = us(st.refillWait(r, now, r.Lease.TTL.Microseconds(), capacity-st.tokens))
	st.expires = now + ceilUS((capacity-st.tokens)/rate) + r.Lease.TTL.Microseconds()
	return d
}

func (st *state) checkWindow(r *rules.Rule, now, cost int64) Decision {
	limit, p := float64(r.Limit), periodUS(r)
	_, start, at := st.roll(r, now)
	used := st.tokens
	if r.Algorithm == rules.SlidingWindow {
		used = st.estimate(r, at, start)
	}
	d := Decision{Limit: r.Limit}
	if used+float64(cost) <= limit {
		st.tokens += float64(cost)
		used += float64(cost)
		d.Allowed = true
	}
	d.Remaining = int64(math.Floor(math.Max(limit-used, 0)))
	end := start + p
	if r.Algorithm == rules.FixedWindow {
		if !d.Allowed {
			d.RetryAfter = us(end - at)
		}
		d.ResetAfter = us(end - at)
		st.expires = end + r.Lease.TTL.Microseconds()
		return d
	}
	if !d.Allowed {
		d.RetryAfter = us(st.slidingRetry(r, at, start, cost))
	}
	switch {
	case st.tokens > 0:
		d.ResetAfter = us(start + 2*p - at)
	case st.prev > 0:
		d.ResetAfter = us(end - at)
	}
	st.expires = start + 2*p + r.Lease.TTL.Microseconds()
	return d
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
