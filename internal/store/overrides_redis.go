package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/rules"
)

// A rule's runtime overrides are one Redis hash, "<prefix>:ov1:{<rule>}":
// the braces put it in one hash slot on Redis Cluster, so each script
// below touches one slot. Field "v" is its version; each override is field
// "k:<key>", its value the JSON of overrideRecord. The hash has no TTL:
// it is configuration, which an outage must not forget.
func (s *Redis) overridesKey(rule string) string {
	return s.prefix + ":ov1:{" + rule + "}"
}

const overrideField = "k:"

// putOverrideScript sets a field and moves the version. A version starts
// at Redis' clock in microseconds, not 1, so that a hash lost (a flushed
// or replaced Redis) and written again cannot come back to a version an
// allocator holds with other content.
var putOverrideScript = redis.NewScript(`
local n = redis.call('HLEN', KEYS[1])
if redis.call('HEXISTS', KEYS[1], 'v') == 1 then
  n = n - 1
else
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'v', t[1] .. string.rep('0', 6 - #t[2]) .. t[2])
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and n >= tonumber(ARGV[3]) then
  return redis.error_reply('allot: overrides: full')
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[1], 'v', 1)
`)

// deleteOverrideScript removes a field, if it holds ARGV[2] when that is
// not empty, and moves the version: {version, old value}, or {0, false}.
var deleteOverrideScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or (ARGV[2] ~= '' and old ~= ARGV[2]) then
  return {0, false}
end
redis.call('HDEL', KEYS[1], ARGV[1])
return {redis.call('HINCRBY', KEYS[1], 'v', 1), old}
`)

const overridesFullReply = "allot: overrides: full"

// PutOverride implements Overrides.
func (s *Redis) PutOverride(ctx context.Context, o rules.RuntimeOverride, max int) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := putOverrideScript.Run(cctx, s.client, []string{s.overridesKey(o.Rule)},
		overrideField+o.Key, encodeOverride(&o), max).Int64()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.Contains(rerr.Error(), overridesFullReply) {
			return 0, ErrOverridesFull
		}
		return 0, s.failure(ctx, err)
	}
	return v, nil
}

// DeleteOverride implements Overrides.
func (s *Redis) DeleteOverride(ctx context.Context, rule, key string) (rules.RuntimeOverride, bool, error) {
	return s.deleteOverride(ctx, rule, key, "")
}

// ExpireOverride implements Overrides.
func (s *Redis) ExpireOverride(ctx context.Context, o rules.RuntimeOverride) (bool, error) {
	_, ok, err := s.deleteOverride(ctx, o.Rule, o.Key, encodeOverride(&o))
	return ok, err
}

func (s *Redis) deleteOverride(ctx context.Context, rule, key, want string) (rules.RuntimeOverride, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := deleteOverrideScript.Run(cctx, s.client, []string{s.overridesKey(rule)}, overrideField+key, want).Slice()
	if err != nil {
		return rules.RuntimeOverride{}, false, s.failure(ctx, err)
	}
	if len(v) != 2 {
		return rules.RuntimeOverride{}, false, badReply("delete override", v)
	}
	old, ok := v[1].(string)
	if !ok {
		return rules.RuntimeOverride{}, false, nil
	}
	o, err := decodeOverride(rule, key, old)
	return o, true, err
}

// OverrideVersions implements Overrides: one pipelined HGET a rule.
func (s *Redis) OverrideVersions(ctx context.Context, names []string) ([]int64, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(names))
	_, err := s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HGet(cctx, s.overridesKey(name), "v")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.failure(ctx, err)
	}
	out := make([]int64, len(names))
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, s.failure(ctx, err)
		default:
			out[i] = n
		}
	}
	return out, nil
}

// LoadOverrides implements Overrides: one HGETALL. It may read a rule's
// most overrides, megabytes, off the path of any decision: it has a
// second at least.
func (s *Redis) LoadOverrides(ctx context.Context, rule string) (int64, []rules.RuntimeOverride, error) {
	cctx, cancel := context.WithTimeout(ctx, max(s.timeout, time.Second))
	defer cancel()
	m, err := s.client.HGetAll(cctx, s.overridesKey(rule)).Result()
	if err != nil {
		return 0, nil, s.failure(ctx, err)
	}
	var version int64
	out := make([]rules.RuntimeOverride, 0, len(m))
	for field, value := range m {
		if field == "v" {
			if version, err = strconv.ParseInt(value, 10, 64); err != nil {
				return 0, nil, fmt.Errorf("store: overrides of rule %q: version %q: %w", rule, value, err)
			}
			continue
		}
		key, ok := strings.CutPrefix(field, overrideField)
		if !ok {
			continue // not ours: a later layout's field
		}
		o, err := decodeOverride(rule, key, value)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, o)
	}
	return version, out, nil
}
