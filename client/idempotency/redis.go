package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a Store in Redis, for a fleet: every process that shares
// the Redis shares the keys. A key is one hash (s: state, t: the claim's
// token, f: the fingerprint, r: the record) with a TTL, so Redis itself
// drops expired keys and a crashed process's claims; each step is one Lua
// script on one key, so it works on Redis Cluster too.
type RedisStore struct {
	c redis.UniversalClient
}

// NewRedisStore returns a store on c, which it uses and does not close.
func NewRedisStore(c redis.UniversalClient) *RedisStore { return &RedisStore{c: c} }

// claimScript is the check and the claim in one step, so that no two
// requests both find the key free. It answers {"c"} when it claimed the
// key, else {state, fingerprint, record}: state "p" (in progress) or "d"
// (done, with the record).
var claimScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 's', 'f', 'r')
if not v[1] then
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'f', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'c'}
end
return {v[1], v[2] or '', v[3] or ''}
`)

// The other steps act only while ARGV[1], the claim's token, holds the
// key; Complete drops the token, so a done key is held by nobody.
var (
	extendScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)
	completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 'r', ARGV[2])
redis.call('HDEL', KEYS[1], 't')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)
	releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)
)

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key, token, fingerprint string, lockTTL time.Duration) (Claim, error) {
	res, err := claimScript.Run(ctx, s.c, []string{key}, token, fingerprint, millis(lockTTL)).StringSlice()
	if err != nil {
		return Claim{}, fmt.Errorf("%w: claim: %w", ErrStore, err)
	}
	if len(res) == 1 && res[0] == "c" {
		return Claim{State: Claimed, Fingerprint: fingerprint}, nil
	}
	if len(res) != 3 {
		return Claim{}, fmt.Errorf("%w: claim: %d values from the script, want 1 or 3", ErrStore, len(res))
	}
	switch res[0] {
	case "p":
		return Claim{State: InProgress, Fingerprint: res[1]}, nil
	case "d":
		rec, err := decodeRecord([]byte(res[2]))
		if err != nil {
			return Claim{}, fmt.Errorf("%w: key %q: %w", ErrStore, key, err)
		}
		rec.Fingerprint = res[1]
		return Claim{State: Done, Fingerprint: res[1], Record: rec}, nil
	}
	return Claim{}, fmt.Errorf("%w: key %q: state %q, want \"p\" or \"d\"", ErrStore, key, res[0])
}

// Extend implements Store.
func (s *RedisStore) Extend(ctx context.Context, key, token string, lockTTL time.Duration) error {
	return s.held(extendScript.Run(ctx, s.c, []string{key}, token, millis(lockTTL)), "extend")
}

// Complete implements Store.
func (s *RedisStore) Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error {
	return s.held(completeScript.Run(ctx, s.c, []string{key}, token, encodeRecord(rec), millis(ttl)), "complete")
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key, token string) error {
	if err := releaseScript.Run(ctx, s.c, []string{key}, token).Err(); err != nil {
		return fmt.Errorf("%w: release: %w", ErrStore, err)
	}
	return nil
}

// held reads a token-guarded step's answer: 1 done, 0 the claim lost.
func (s *RedisStore) held(cmd *redis.Cmd, step string) error {
	n, err := cmd.Int()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrStore, step, err)
	}
	if n == 0 {
		return ErrClaimLost
	}
	return nil
}

// millis is d in whole milliseconds for PEXPIRE, at least 1 (0 is an
// error there, and a claim must not outlive what was asked by much).
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}
