package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
)

// Redis is the shared store of a fleet of allocators. Each (rule, key) is one
// Redis key changed by one Lua script call (a port of core.go), with the time
// taken from Redis and a TTL set in the same call; a batch is one pipelined
// round trip. Every failure to reach Redis wraps ErrUnavailable.
type Redis struct {
	client  redis.UniversalClient
	cluster bool // a call may touch one key only: one hash slot
	owned   bool // Close closes the client: DialRedis made it
	timeout time.Duration
	prefix  string
	clk     clock.Clock // where calendar windows are looked for (ruleArgs)
	cap     redisKeys   // the cap on the database's keys (redis_keys.go)
	closing sync.Once
}

// RedisOptions tunes a Redis store. A zero field takes
// DefaultRedisOptions' value, which is set and explained there; Cluster,
// which it leaves false, is off until set.
type RedisOptions struct {
	// Timeout bounds each store call, a retry after NOSCRIPT included; it
	// also bounds DialRedis' dials and pool waits.
	Timeout time.Duration
	// KeyPrefix starts every key the store writes: "<prefix>:<tag>:{rule|key}" (tag: tb3, fw3, sw3, sl2).
	KeyPrefix string
	// Cluster makes DialRedis connect to a Redis Cluster. The URL then names
	// one or more seed nodes: "redis://h1:p1?addr=h2:p2&addr=h3:p3" (the
	// redis.ParseClusterURL form).
	// default: false, a single Redis
	Cluster bool
	// MaxKeys caps the keys of the database (DBSIZE, Allot's and any
	// other's): at it, a call that would add a key gets a *FullError and
	// keys held keep deciding. Negative: no cap.
	MaxKeys int64
	// Clock is the allocator's clock, which says around which instant to
	// send a calendar rule's window boundaries: Redis TIME still picks the
	// instant among them (ruleArgs).
	Clock clock.Clock
}

// DefaultCallTimeout bounds a store call unless told otherwise (the
// allocator's --store-timeout; the server's and the Redis store's
// default): a Redis nearby answers in a millisecond, so a dead or hung one
// costs a call this, not seconds, and well under a node's lease call
// timeout, so that a call on a dead store fails in time for the node to
// try another allocator.
const DefaultCallTimeout = 100 * time.Millisecond

// DefaultRedisOptions is what a zero field of RedisOptions takes, each
// value with its reason. The allocator passes its own --store-timeout.
func DefaultRedisOptions() RedisOptions {
	return RedisOptions{
		Timeout:   DefaultCallTimeout,  // its doc says why
		KeyPrefix: "allot",             // a Redis shared with others tells Allot's keys by their start
		MaxKeys:   DefaultRedisMaxKeys, // its doc says why
		Clock:     clock.Real(),
	}
}

// withDefaults gives every zero field DefaultRedisOptions' value.
func (o RedisOptions) withDefaults() RedisOptions {
	d := DefaultRedisOptions()
	if o.Timeout == 0 {
		o.Timeout = d.Timeout
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = d.KeyPrefix
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = d.MaxKeys
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	return o
}

// NewRedis returns a store on client, a *redis.Client or *redis.ClusterClient
// whose options must enable ContextTimeoutEnabled (else go-redis ignores the
// per-call deadline on sockets and a hung Redis blocks for ReadTimeout). The
// caller keeps ownership: Close leaves the client open.
//
// The scripts are loaded now if Redis answers; a Redis that is down is not an
// error, since the scripts load again by themselves (see run) once it is back.
// A Redis that answers but refuses a script is an error.
func NewRedis(client redis.UniversalClient, opts RedisOptions) (*Redis, error) {
	if client == nil {
		return nil, errors.New("store: NewRedis: nil client")
	}
	opts = opts.withDefaults()
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("store: NewRedis: negative timeout %v", opts.Timeout)
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		// Redis Cluster would hash the prefix's braces, not (rule, key):
		// every key in one slot.
		return nil, fmt.Errorf("store: NewRedis: key prefix %q holds a brace", opts.KeyPrefix)
	}
	if err := checkContextTimeouts(client); err != nil {
		return nil, err
	}
	_, cluster := client.(*redis.ClusterClient)
	s := &Redis{client: client, cluster: cluster, timeout: opts.Timeout, prefix: opts.KeyPrefix, clk: opts.Clock}
	if err := s.loadScripts(); err != nil {
		return nil, err
	}
	s.watchKeys(opts.MaxKeys)
	return s, nil
}

// Close closes the client if the store created it (DialRedis); a client
// passed to NewRedis is left to its owner.
func (s *Redis) Close() error {
	var err error
	s.closing.Do(func() {
		s.stopKeys()
		if s.owned {
			err = s.client.Close()
		}
	})
	return err
}

// Acquire implements Store: the whole batch is one pipelined round trip.
func (s *Redis) Acquire(ctx context.Context, reqs []AcquireRequest) ([]Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range reqs {
		if !reqs[i].Reportable() {
			return nil, ErrNotLeasable
		}
	}
	if err := s.refuseNew(ctx, reqs); err != nil {
		return nil, err
	}
	calls := make([]scriptCall, len(reqs))
	for i := range reqs {
		calls[i] = s.acquireCall(&reqs[i])
	}
	replies, err := s.run(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([]Lease, len(reqs))
	for i, v := range replies {
		if reqs[i].Rule.IsConcurrency() {
			if out[i], err = slotReply(v); err != nil {
				return nil, err
			}
			continue
		}
		ints, rate, err := leaseReply(v)
		if err != nil {
			return nil, err
		}
		out[i] = Lease{Granted: ints[0], Remaining: ints[1], TTL: us(ints[2]), RetryAfter: us(ints[3]),
			Holders: int(ints[4]), Epoch: ints[5], Rate: rate, FullFor: us(ints[6]), FullInTTL: us(ints[7]), FallbackNodes: ints[8]}
	}
	return out, nil
}

// Release implements Store: the whole batch is one pipelined round trip.
func (s *Redis) Release(ctx context.Context, rets []Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rets {
		if !rets[i].Rule.Leasable() && !rets[i].Rule.IsConcurrency() {
			return ErrNotLeasable
		}
	}
	calls := make([]scriptCall, len(rets))
	for i := range rets {
		calls[i] = s.releaseCall(&rets[i])
	}
	_, err := s.run(ctx, calls)
	return err
}

// Check implements Store.
func (s *Redis) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (Decision, error) {
	if err := checkable(ctx, r, cost); err != nil {
		return Decision{}, err
	}
	if err := s.refuseNew(ctx, checkRequest(r, key)); err != nil {
		return Decision{}, err
	}
	replies, err := s.run(ctx, []scriptCall{s.checkCall(r, key, cost)})
	if err != nil {
		return Decision{}, err
	}
	v := replies[0]
	var ints [4]int64
	for i := range ints {
		n, ok := v[i].(int64)
		if len(v) != len(ints) || !ok {
			return Decision{}, badReply("check", v)
		}
		ints[i] = n
	}
	return Decision{Allowed: ints[0] == 1, Limit: r.Limit, Remaining: ints[1], RetryAfter: us(ints[2]), ResetAfter: us(ints[3])}, nil
}

func badReply(op string, v []any) error {
	return fmt.Errorf("store: redis %s script replied %v", op, v)
}

// leaseReply reads an acquire script's reply: six integers, the rate lent
// as a string (Redis would truncate a Lua number to an integer), then, from
// a token bucket's script, its fullness: two more integers (µs).
func leaseReply(v []any) ([9]int64, float64, error) {
	var ints [9]int64
	// 7: a report's; 10: a lease's, with a token bucket's fullness and the
	// fallback's count.
	if len(v) != 7 && len(v) != 10 {
		return ints, 0, badReply("acquire", v)
	}
	for i, x := range v {
		if i == 6 {
			continue
		}
		n, ok := x.(int64)
		if !ok || i > 6 && n < 0 {
			return ints, 0, badReply("acquire", v)
		}
		if i > 6 {
			i--
		}
		ints[i] = n
	}
	s, ok := v[6].(string)
	if !ok {
		return ints, 0, badReply("acquire", v)
	}
	rate, err := strconv.ParseFloat(s, 64)
	if err != nil || rate < 0 || math.IsInf(rate, 0) {
		return ints, 0, badReply("acquire", v)
	}
	return ints, rate, nil
}

// scriptCall is one operation of a script on one key.
type scriptCall struct {
	script   *luaScript
	op       string // 'a' acquire, 'r' release, 'c' check
	key      string
	args     msgpack // the key's item's arguments
	calendar bool    // its rule's windows follow the calendar (ruleArgs)
}

// ruleArgs start the arguments of every item: the rule. A calendar rule's
// period is an array instead of a number: its nominal period, then the
// four boundaries of the calendar windows around the allocator's clock
// (rules.Calendar.Bounds), among which the script finds the one holding
// Redis TIME. Lua has no time zone database, so Go does the calendar; the
// three windows let Redis' clock be a whole period away from the
// allocator's either way (a store clock beyond them is refused, see
// common.lua), and a state keeps its window's end, so a clock stepped back
// needs no boundary of the past.
func (s *Redis) ruleArgs(r *rules.Rule) msgpack {
	m := make(msgpack, 0, 96).int(r.Limit)
	if r.IsCalendar() {
		b := r.Calendar.Bounds(s.clk.Now().UnixMicro())
		m = m.array(1 + len(b)).int(periodUS(r))
		for _, x := range b {
			m = m.int(x)
		}
	} else {
		m = m.int(periodUS(r))
	}
	return m.int(r.Burst).int(r.Lease.TTL.Microseconds())
}

func (s *Redis) acquireCall(req *AcquireRequest) scriptCall {
	if req.Rule.IsConcurrency() {
		return s.slotCall(req)
	}
	// Then whether the rule is strict (the acquire only reports
	// consumption), what the node holds (-1: it did not say), what its
	// fallback divides by and whether it sent on its fallback; then what
	// it settled and the rule's debt (core_debt.go), and how long ago it
	// first spent since its last request (-1: it did not say).
	args := s.ruleArgs(req.Rule).str(req.Node).int(req.Want).int(req.Consumed).int(req.ConsumedAge.Microseconds()).
		float(req.WantRate).int(req.Returned).int(req.ReturnedEpoch).int(req.Seq).bool(!req.Rule.Leasable()).
		int(reportOf(req.Held, req.HeldKnown).arg()).int(max(req.FallbackNodes, 0)).bool(req.OnFallback).
		int(max(req.Settled, 0)).int(req.Rule.Debt()).int(req.heldFor())
	return scriptCall{scriptFor(req.Rule), "a", s.key(req.Rule, req.Key), args, req.Rule.IsCalendar()}
}

func (s *Redis) releaseCall(ret *Return) scriptCall {
	args := s.ruleArgs(ret.Rule).str(ret.Node).int(ret.Tokens).int(ret.Epoch).int(reportOf(ret.Held, ret.HeldKnown).arg())
	return scriptCall{scriptFor(ret.Rule), "r", s.key(ret.Rule, ret.Key), args, ret.Rule.IsCalendar()}
}

func (s *Redis) checkCall(r *rules.Rule, key string, cost int64) scriptCall {
	return scriptCall{scriptFor(r), "c", s.key(r, key), s.ruleArgs(r).int(cost), r.IsCalendar()}
}

// key is "<prefix>:<alg>[@<period>]:{<rule>|<key>}". The algorithm is part of the name,
// so a rule whose algorithm changes on reload starts afresh instead of
// meeting a value of the wrong type; so is a window's period, or its
// calendar's unit and zone ("@month:Europe/Paris", see stateVariant).
// The braces are a Redis Cluster hash tag that puts one (rule, key) in one
// slot, and spreads distinct keys over slots. Rule names
// never hold '|', so the name is unambiguous whatever the key holds; a '}'
// in the key only shortens the hash tag.
func (s *Redis) key(r *rules.Rule, key string) string {
	return s.prefix + ":" + scriptFor(r).tag + stateVariant(r) + ":{" + r.Name + "|" + key + "}"
}
