package store

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/rules"
)

// Running the scripts on Redis: batches of calls in one pipeline, a
// NOSCRIPT answered by EVAL, what a failure means, and the scripts
// themselves, built from lua/.

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
	s.send(ctx, batches, cmds, bySHA)
	if clearNoScript(cmds) {
		s.send(ctx, batches, cmds, bySource)
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
// of the keys (ARGV[i+1] is KEYS[i]'s), then, when a call's rule follows
// the calendar, calendarMark: the script then checks every calendar item's
// boundaries before it runs any item (common.lua).
type batch struct {
	script   *luaScript
	calls    []int
	keys     []string
	args     []any
	calendar bool
}

// calendarMark is the argument after the items of a batch that holds
// calendar windows.
const calendarMark = "calendar"

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
		b.calendar = b.calendar || c.calendar
	}
	for i := range out {
		if out[i].calendar {
			out[i].args = append(out[i].args, calendarMark)
		}
	}
	return out
}

// scriptBy says how send names a script to Redis.
type scriptBy uint8

const (
	bySHA    scriptBy = iota // EVALSHA: the script Redis has cached
	bySource                 // EVAL: its source, which Redis caches
)

// send pipelines the batches whose slot in cmds is nil and fills it.
func (s *Redis) send(ctx context.Context, batches []batch, cmds []*redis.Cmd, by scriptBy) {
	pipe := s.client.Pipeline()
	for i := range batches {
		if cmds[i] != nil {
			continue
		}
		b := &batches[i]
		if by == bySource {
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
	if errors.As(err, &rerr) && strings.Contains(rerr.Error(), calendarClockReply) {
		// Another allocator, whose clock is near Redis', may serve it.
		return fmt.Errorf("%w: %w: %v", ErrUnavailable, ErrCalendarClock, err)
	}
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
// algorithm's lease file (and for the windows window_lease.lua, their
// acquire sequence), so that the shared helpers exist once in the source
// tree. A call of checks ends at the end of the algorithm's file and
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
	//go:embed lua/window_lease.lua
	luaWindowLease string
	//go:embed lua/sliding_log.lua
	luaSlidingLog string
	//go:embed lua/concurrency.lua
	luaConcurrency string
)

// scripts is indexed by rules.Algorithm. A tag names a state's layout: a
// layout that changes takes a new tag, so that allocators of two versions,
// side by side in a rolling deploy, never read each other's keys (each
// keeps its own state of a key meanwhile: see docs/operations.md, "Upgrades").
// tb3, fw3 and sw3 are states in one MessagePack string (common.lua) whose
// holders carry n, the holder count their last lease told them; tb2, fw2
// and sw2 were the same without it, and tb, fw and sw hashes of text
// fields. A holder back from an absence has a back record after its own
// (common.lua): the version before reads it as a holder long gone, and a
// holder without one as not back, so the tags stayed. sl2 is the sliding log of one entry per request; sl held one per
// token.
var scripts = [...]*luaScript{
	rules.TokenBucket:   newLuaScript("token_bucket", "tb3", luaTokenBucket, luaLease, luaTokenBucketLease),
	rules.FixedWindow:   newLuaScript("fixed_window", "fw3", luaFixedWindow, luaLease, luaFixedWindowLease, luaWindowLease),
	rules.SlidingWindow: newLuaScript("sliding_window", "sw3", luaSlidingWindow, luaLease, luaSlidingWindowLease, luaWindowLease),
	rules.SlidingLog:    newLuaScript("sliding_log", "sl2", luaSlidingLog),
	// cc2: a concurrency key's holders (core_concurrency.go), each with
	// the seq of its last applied request; cc1 was the same without it.
	rules.Concurrency: newLuaScript("concurrency", "cc2", luaConcurrency),
}

func newLuaScript(name, tag string, parts ...string) *luaScript {
	src := luaCommon + "\n" + strings.Join(parts, "\n")
	sum := sha1.Sum([]byte(src))
	return &luaScript{name: name, tag: tag, src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptFor returns the script of r's algorithm; rules are normalized, so
// the algorithm is one of the five.
func scriptFor(r *rules.Rule) *luaScript { return scripts[r.Algorithm] }
