package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Making a Redis store's client: DialRedis from a URL, with timeouts set
// for fast failure, and the check that a client passed to NewRedis honours
// each call's deadline.

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
