package store

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
	cap     redisKeys // the cap on the database's keys (redis_keys.go)
	closing sync.Once
}

// RedisOptions tunes a Redis store. The zero value means the defaults.
type RedisOptions struct {
	// Timeout bounds each store call, a retry after NOSCRIPT included, so
	// that a dead or hung Redis costs milliseconds, not seconds.
	// default: 50ms
	Timeout time.Duration
	// KeyPrefix starts every key the store writes: "<prefix>:<tag>:{rule|key}" (tag: tb2, fw2, sw2, sl2).
	// default: "allot"
	KeyPrefix string
	// Cluster makes DialRedis connect to a Redis Cluster. The URL then names
	// one or more seed nodes: "redis://h1:p1?addr=h2:p2&addr=h3:p3" (the
	// redis.ParseClusterURL form).
	// default: false, a single Redis
	Cluster bool
	// MaxKeys caps the keys of the database (DBSIZE, Allot's and any
	// other's): at it, a call that would add a key gets a *FullError and
	// keys held keep deciding. Negative: no cap. default: DefaultRedisMaxKeys
	MaxKeys int64
}

const (
	defaultRedisTimeout = 50 * time.Millisecond
	defaultKeyPrefix    = "allot"
)

func (o RedisOptions) withDefaults() RedisOptions {
	if o.Timeout == 0 {
		o.Timeout = defaultRedisTimeout
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = defaultKeyPrefix
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultRedisMaxKeys
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
	s := &Redis{client: client, cluster: cluster, timeout: opts.Timeout, prefix: opts.KeyPrefix}
	if err := s.loadScripts(); err != nil {
		return nil, err
	}
	s.watchKeys(opts.MaxKeys)
	return s, nil
}

func checkContextTimeouts(client redis.UniversalClient) error {
	enabled := true
	switch c := client.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	}
	if !enabled {
		return errors.New("store: NewRedis: the client must set ContextTimeoutEnabled, or a hung Redis blocks calls for its ReadTimeout")
	}
	return nil
}

// DialRedis connects to the Redis at url (redis:// or rediss://, see
// redis.ParseURL; with opts.Cluster, the seed list form of
// redis.ParseClusterURL) and returns a store that owns the client. Timeouts
// the URL leaves unset are set for fast failure: dial, read, write and pool
// waits of opts.Timeout, no retries inside go-redis (a retry would double the
// time a caller waits on a dead Redis; the caller retries by itself), and
// sockets that honour each call's deadline. A Redis more than a few
// milliseconds away needs a larger opts.Timeout: it bounds dials too.
func DialRedis(url string, opts RedisOptions) (*Redis, error) {
	opts = opts.withDefaults()
	client, err := dial(url, opts)
	if err != nil {
		return nil, fmt.Errorf("store: DialRedis: %w", err)
	}
	if err := firstContact(client, opts.Timeout); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("store: DialRedis: %w", err)
	}
	s, err := NewRedis(client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

func dial(url string, opts RedisOptions) (redis.UniversalClient, error) {
	if opts.Cluster {
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, err
		}
		failFast(opts.Timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries)
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	failFast(opts.Timeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries)
	o.ContextTimeoutEnabled = true
	return redis.NewClient(o), nil
}

// failFast fills the timeouts and retry counts that are still zero.
func failFast(timeout time.Duration, dial, read, write, pool *time.Duration, retries, dialRetries *int) {
	for _, d := range []*time.Duration{dial, read, write, pool} {
		if *d == 0 {
			*d = timeout
		}
	}
	if *retries == 0 {
		*retries = -1 // go-redis: -1 disables retries, 0 means 3
	}
	if *dialRetries == 0 {
		*dialRetries = 1 // one dial attempt per call; 0 means 5 with backoff
	}
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
		ints, rate, err := leaseReply(v)
		if err != nil {
			return nil, err
		}
		out[i] = Lease{Granted: ints[0], Remaining: ints[1], TTL: us(ints[2]), RetryAfter: us(ints[3]),
			Holders: int(ints[4]), Epoch: ints[5], Rate: rate, FullFor: us(ints[6]), FullInTTL: us(ints[7])}
	}
	return out, nil
}

// Release implements Store: the whole batch is one pipelined round trip.
func (s *Redis) Release(ctx context.Context, rets []Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rets {
		if !rets[i].Rule.Leasable() {
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
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if cost > r.Capacity() {
		return Decision{}, ErrCostAboveCapacity
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
func leaseReply(v []any) ([8]int64, float64, error) {
	var ints [8]int64
	if len(v) != 7 && len(v) != 9 { // 9: a token bucket's, with its fullness
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
	script *luaScript
	op     string // 'a' acquire, 'r' release, 'c' check
	key    string
	args   msgpack // the key's item's arguments
}

// ruleArgs start the arguments of every item: the rule.
func ruleArgs(r *rules.Rule) msgpack {
	return make(msgpack, 0, 64).int(r.Limit).int(periodUS(r)).int(r.Burst).int(r.Lease.TTL.Microseconds())
}

func (s *Redis) acquireCall(req *AcquireRequest) scriptCall {
	// Last, whether the rule is strict: the acquire only reports consumption.
	args := ruleArgs(req.Rule).str(req.Node).int(req.Want).int(req.Consumed).int(req.ConsumedAge.Microseconds()).
		float(req.WantRate).int(req.Returned).int(req.ReturnedEpoch).int(req.Seq).bool(!req.Rule.Leasable())
	return scriptCall{scriptFor(req.Rule), "a", s.key(req.Rule, req.Key), args}
}

func (s *Redis) releaseCall(ret *Return) scriptCall {
	return scriptCall{scriptFor(ret.Rule), "r", s.key(ret.Rule, ret.Key), ruleArgs(ret.Rule).str(ret.Node).int(ret.Tokens).int(ret.Epoch)}
}

func (s *Redis) checkCall(r *rules.Rule, key string, cost int64) scriptCall {
	return scriptCall{scriptFor(r), "c", s.key(r, key), ruleArgs(r).int(cost)}
}

// key is "<prefix>:<alg>[@<period>]:{<rule>|<key>}". The algorithm is part of the name,
// so a rule whose algorithm changes on reload starts afresh instead of
// meeting a value of the wrong type; so is a window's period (see
// stateVariant). The braces are a Redis Cluster hash tag that puts one
// (rule, key) in one slot, and spreads distinct keys over slots. Rule names
// never hold '|', so the name is unambiguous whatever the key holds; a '}'
// in the key only shortens the hash tag.
func (s *Redis) key(r *rules.Rule, key string) string {
	return s.prefix + ":" + scriptFor(r).tag + stateVariant(r) + ":{" + r.Name + "|" + key + "}"
}

// run sends the calls and returns their replies in order. On a single
// Redis the calls of one algorithm go in one script call (a batch of keys
// is one command, one TIME); on Redis Cluster each is its own, as a script
// may touch one hash slot only. The script calls go in one pipeline. One
// answered NOSCRIPT (Redis restarted, flushed its scripts, or a cluster
// node never saw them) is sent again once with EVAL, which runs the source
// and caches it for the next EVALSHA. NOSCRIPT means the script did not
// run, so the retry cannot apply a request twice. The deadline covers both
// round trips.
func (s *Redis) run(parent context.Context, calls []scriptCall) ([][]any, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	batches := s.batches(calls)
	cmds := make([]*redis.Cmd, len(batches))
	s.send(ctx, batches, cmds, false)
	if clearNoScript(cmds) {
		s.send(ctx, batches, cmds, true)
	}
	out := make([][]any, len(calls))
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return nil, s.failure(parent, err)
		}
		b := &batches[i]
		v, err := cmd.Slice()
		if err != nil || len(v) != len(b.calls) {
			return nil, fmt.Errorf("store: redis script %s replied %v for %d keys: %v", b.script.name, cmd.Val(), len(b.calls), err)
		}
		for j, reply := range v {
			item, ok := reply.([]any)
			if !ok {
				return nil, fmt.Errorf("store: redis script %s replied %v for key %d", b.script.name, reply, j)
			}
			out[b.calls[j]] = item
		}
	}
	return out, nil
}

// batch is one script call: the calls it runs, by index, with their keys,
// and its arguments: the calls' operation, then each call's, in the order
// of the keys (ARGV[i+1] is KEYS[i]'s).
type batch struct {
	script *luaScript
	calls  []int
	keys   []string
	args   []any
}

// maxBatchKeys bounds the keys of one script call, so that one call does
// not hold Redis for long.
const maxBatchKeys = 500

func (s *Redis) batches(calls []scriptCall) []batch {
	type kind struct {
		script *luaScript
		op     string
	}
	var out []batch
	open := map[kind]int{} // the batch still taking calls, per script and operation
	for i := range calls {
		c := &calls[i]
		k := kind{c.script, c.op}
		j, ok := open[k]
		if !ok || s.cluster || len(out[j].calls) == maxBatchKeys {
			out = append(out, batch{script: c.script, args: []any{c.op}})
			j = len(out) - 1
			open[k] = j
		}
		b := &out[j]
		b.calls = append(b.calls, i)
		b.keys = append(b.keys, c.key)
		b.args = append(b.args, []byte(c.args))
	}
	return out
}

// send pipelines the batches whose slot in cmds is nil and fills it.
func (s *Redis) send(ctx context.Context, batches []batch, cmds []*redis.Cmd, eval bool) {
	pipe := s.client.Pipeline()
	for i := range batches {
		if cmds[i] != nil {
			continue
		}
		b := &batches[i]
		if eval {
			cmds[i] = pipe.Eval(ctx, b.script.src, b.keys, b.args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, b.script.sha, b.keys, b.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
}

// clearNoScript clears the commands that failed with NOSCRIPT, so that send
// sends just those again, and reports whether there were any.
func clearNoScript(cmds []*redis.Cmd) bool {
	found := false
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i], found = nil, true
		}
	}
	return found
}

// failure classifies an error of a store call. The caller's own cancellation
// or deadline is returned as such. A reply that retrying cannot fix (a
// script error, WRONGTYPE) is a plain error. Everything else (a refused
// dial, a timeout, a reset connection, an exhausted pool, a loading, busy,
// read-only or failing-over server, a cluster that is down or resharding,
// and a Redis that refuses this allocator's credentials) is ErrUnavailable,
// with the cause kept in the message.
//
// A refusal of credentials (NOAUTH, WRONGPASS, NOPERM: Redis came back
// with a password or an ACL the allocator does not have) fails every call
// alike, so it is an outage of this allocator, not a fault of the request:
// nodes fall back (open rules) or deny (closed rules) and count the
// allocator as unreachable, and its health says NOT_SERVING. At start-up
// the same replies fail DialRedis instead (see firstContact).
func (s *Redis) failure(parent context.Context, err error) error {
	if perr := parent.Err(); perr != nil {
		return perr
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && refused(rerr) {
		return fmt.Errorf("%w: redis refuses the allocator's credentials: %v", ErrUnavailable, err)
	}
	if errors.As(err, &rerr) && !transient(rerr) {
		return fmt.Errorf("store: redis: %w", err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// transientReplies are the error replies of a Redis that cannot serve now
// but will.
var transientReplies = []string{
	"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY",
	"NOREPLICAS", "OOM", "MISCONF", "MOVED", "ASK", "NOSCRIPT",
}

func transient(err redis.Error) bool { return hasReplyPrefix(err, transientReplies) }

// refusedReplies are the error replies of a Redis that does not accept
// the allocator's credentials. An unauthenticated client that sends a
// command of many arguments (every script call) gets the protocol error
// instead of NOAUTH, and is disconnected.
var refusedReplies = []string{"NOAUTH", "WRONGPASS", "NOPERM", "ERR Protocol error: unauthenticated"}

func refused(err redis.Error) bool { return hasReplyPrefix(err, refusedReplies) }

func hasReplyPrefix(err redis.Error, prefixes []string) bool {
	msg := err.Error()
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p+" ") || msg == p {
			return true
		}
	}
	return false
}

// loadScripts loads every script (on every shard of a cluster). Only an
// answer from Redis that refuses a script fails; unreachable is left to the
// NOSCRIPT path.
func (s *Redis) loadScripts() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	for _, sc := range scripts {
		if sc == nil {
			continue
		}
		sha, err := s.client.ScriptLoad(ctx, sc.src).Result()
		var rerr redis.Error
		switch {
		case errors.As(err, &rerr) && !transient(rerr):
			return fmt.Errorf("store: redis refused script %s: %w", sc.name, err)
		case err != nil:
			return nil
		case sha != sc.sha:
			return fmt.Errorf("store: redis hashed script %s as %s, want %s", sc.name, sha, sc.sha)
		}
	}
	return nil
}

// luaScript is one algorithm's script: common.lua followed by the
// algorithm's file and, for the algorithms that lease, lease.lua and the
// algorithm's lease file, so that the shared helpers exist once in the
// source tree. A call of checks ends at the end of the algorithm's file and
// makes none of the lease part's closures.
type luaScript struct {
	name string
	tag  string // the algorithm's part of a key, with its layout's version
	src  string
	sha  string // hex SHA-1 of src, as EVALSHA names it
}

var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/lease.lua
	luaLease string
	//go:embed lua/token_bucket.lua
	luaTokenBucket string
	//go:embed lua/token_bucket_lease.lua
	luaTokenBucketLease string
	//go:embed lua/fixed_window.lua
	luaFixedWindow string
	//go:embed lua/fixed_window_lease.lua
	luaFixedWindowLease string
	//go:embed lua/sliding_window.lua
	luaSlidingWindow string
	//go:embed lua/sliding_window_lease.lua
	luaSlidingWindowLease string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
)

// scripts is indexed by rules.Algorithm. A tag names a state's layout: a
// layout that changes takes a new tag, so that allocators of two versions,
// side by side in a rolling deploy, never read each other's keys (each
// keeps its own state of a key meanwhile: see the README's "Redis keys").
// tb2, fw2 and sw2 are states in one MessagePack string (common.lua); tb,
// fw and sw were hashes of text fields. sl2 is the sliding log of one entry
// per request; sl held one per token.
var scripts = [...]*luaScript{
	rules.TokenBucket:   newLuaScript("token_bucket", "tb2", luaTokenBucket, luaLease, luaTokenBucketLease),
	rules.FixedWindow:   newLuaScript("fixed_window", "fw2", luaFixedWindow, luaLease, luaFixedWindowLease),
	rules.SlidingWindow: newLuaScript("sliding_window", "sw2", luaSlidingWindow, luaLease, luaSlidingWindowLease),
	rules.SlidingLog:    newLuaScript("sliding_log", "sl2", luaSlidingLog),
}

func newLuaScript(name, tag string, parts ...string) *luaScript {
	src := luaCommon + "\n" + strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(src))
	return &luaScript{name: name, tag: tag, src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptFor returns the script of r's algorithm; rules are normalized, so
// the algorithm is one of the four.
func scriptFor(r *rules.Rule) *luaScript { return scripts[r.Algorithm] }
