package store

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/rules"
)

// The Redis store's cap on keys. Redis counts the keys of a database
// (DBSIZE), not Allot's alone, so the store polls that count and, while it
// is at the cap, asks before each call whether its keys exist (one EXISTS
// each, pipelined: a second round trip, paid only while full). A call that
// would add a key is refused with a *FullError; keys held keep deciding.

// DefaultRedisMaxKeys is RedisOptions.MaxKeys' default: ten million keys,
// about 2–5 GB of Redis at the measured 200–490 B a key.
const DefaultRedisMaxKeys = 10_000_000

// keysPoll is how often the store reads the database's size: DBSIZE
// is O(1), and a flood of new keys passes the cap by at most what it adds
// in this time.
const keysPoll = 100 * time.Millisecond

// redisKeys is the Redis store's count of keys and its cap.
type redisKeys struct {
	max     int64
	keys    atomic.Int64
	full    atomic.Bool
	refused atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

// watchKeys starts polling the database's size when a cap is set.
func (s *Redis) watchKeys(max int64) {
	s.cap.max = max
	if max <= 0 {
		return
	}
	s.cap.stop, s.cap.done = make(chan struct{}), make(chan struct{})
	s.pollKeys()
	go func() {
		defer close(s.cap.done)
		t := time.NewTicker(keysPoll)
		defer t.Stop()
		for {
			select {
			case <-s.cap.stop:
				return
			case <-t.C:
				s.pollKeys()
			}
		}
	}()
}

func (s *Redis) stopKeys() {
	if s.cap.stop != nil {
		close(s.cap.stop)
		<-s.cap.done
	}
}

// pollKeys reads the database's size: the sum over the masters of a
// cluster. A failed read keeps the last count.
func (s *Redis) pollKeys() {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, 100*time.Millisecond))
	defer cancel()
	var n int64
	var err error
	if c, ok := s.client.(*redis.ClusterClient); ok {
		var sum atomic.Int64
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			k, err := m.DBSize(ctx).Result()
			sum.Add(k)
			return err
		})
		n = sum.Load()
	} else {
		n, err = s.client.DBSize(ctx).Result()
	}
	if err != nil {
		return
	}
	s.cap.keys.Store(n)
	s.cap.full.Store(n >= s.cap.max)
}

// Keys implements KeyCounter: the database's size at the last poll.
func (s *Redis) Keys() int64 { return s.cap.keys.Load() }

// MaxKeys implements KeyCounter.
func (s *Redis) MaxKeys() int64 { return s.cap.max }

// Refused implements KeyCounter.
func (s *Redis) Refused() uint64 { return s.cap.refused.Load() }

// refuseNew fails a call that would add a key while the database is at
// the cap; it costs nothing otherwise.
func (s *Redis) refuseNew(ctx context.Context, reqs []AcquireRequest) error {
	if !s.cap.full.Load() {
		return nil
	}
	exists, err := s.Exists(ctx, reqs)
	if err != nil {
		return err
	}
	if i := firstNew(exists); i >= 0 {
		s.cap.refused.Add(1)
		return &FullError{Store: "redis", Request: i, Keys: s.cap.keys.Load(), Max: s.cap.max}
	}
	return nil
}

// Exists implements Exister: one EXISTS a key, in one pipeline.
func (s *Redis) Exists(parent context.Context, reqs []AcquireRequest) ([]bool, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(reqs))
	for i := range reqs {
		cmds[i] = pipe.Exists(ctx, s.key(reqs[i].Rule, reqs[i].Key))
	}
	_, _ = pipe.Exec(ctx)
	out := make([]bool, len(reqs))
	for i, c := range cmds {
		n, err := c.Result()
		if err != nil {
			return nil, s.failure(parent, err)
		}
		out[i] = n > 0
	}
	return out, nil
}

// checkRequest is the request a Check stands for, for refuseNew.
func checkRequest(r *rules.Rule, key string) []AcquireRequest {
	return []AcquireRequest{{Rule: r, Key: key}}
}
