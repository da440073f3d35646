package store

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
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
//
// An error says what is wrong with url, or with the Redis it names, and
// what was expected, without url itself, which may hold a password: the
// caller says where url came from (the allocator's --redis).
func DialRedis(url string, opts RedisOptions) (*Redis, error) {
	opts = opts.withDefaults()
	client, err := dial(url, opts)
	if err != nil {
		return nil, urlError(url, opts.Cluster, err)
	}
	if err := firstContact(client, opts.Timeout); err != nil {
		_ = client.Close()
		return nil, err
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

// urlError rewrites go-redis's refusal of a URL ("redis: invalid URL
// scheme: http") as what was wrong and what a good URL looks like. The
// net/url error it may hold quotes the whole URL, password and all: only
// its reason is kept.
func urlError(raw string, cluster bool, err error) error {
	example := "redis://user:password@host:6379/0"
	if cluster {
		example = "redis://user:password@host1:6379?addr=host2:6379&addr=host3:6379"
	}
	var parse *url.Error
	if errors.As(err, &parse) {
		return fmt.Errorf("%v; want a URL such as %s", parse.Err, example)
	}
	if u, perr := url.Parse(raw); perr == nil && u.Scheme != "redis" && u.Scheme != "rediss" && (cluster || u.Scheme != "unix") {
		return fmt.Errorf("want a redis:// or rediss:// URL, got scheme %q", u.Scheme)
	}
	return fmt.Errorf("%s; want a URL such as %s", strings.TrimPrefix(err.Error(), "redis: "), example)
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
