package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Prober is a store whose backend can be asked whether it serves. The
// allocator's health follows it; a store without it is always healthy.
type Prober interface {
	// Probe returns nil when the store can serve calls now, else what a
	// call would fail with (ErrUnavailable for an outage).
	Probe(ctx context.Context) error
}

// probeScript is the cheapest call that passes where real calls pass: a
// script, so that a Redis that answers PING but refuses EVALSHA (AUTH after
// a restart, an ACL without scripting) fails the probe too.
var probeScript = redis.NewScript("return 1")

// Probe implements Prober: the probe script on every master, within the
// store timeout.
func (s *Redis) Probe(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	var err error
	if c, ok := s.client.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, shard *redis.Client) error {
			return probeScript.Run(ctx, shard, nil).Err()
		})
	} else {
		err = probeScript.Run(ctx, s.client, nil).Err()
	}
	if err != nil {
		return s.failure(parent, err)
	}
	return nil
}
