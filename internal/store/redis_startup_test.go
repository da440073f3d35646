package store_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/certs/certstest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// A Redis that is misconfigured fails start-up with a reason, like a wrong
// password; a Redis that is down does not (TestRedisStartsWhileRedisIsDown).
func TestDialRedisFailsOnMisconfiguration(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "redis-ca")
	certFile, keyFile := ca.Issue(t, certstest.Loopback).Write(t, dir, "redis")
	tlsRedis := redistest.StartTLS(t, certFile, keyFile)
	plain := redistest.Start(t)
	locked := redistest.Start(t, "--requirepass", "s3cret-s3cret")
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)

	cases := []struct{ name, url, want string }{
		{"plaintext to a TLS-only Redis", "redis://" + tlsRedis.Addr() + "/0", "rediss://"},
		{"TLS to a plaintext Redis", "rediss://" + plain.Addr() + "/0", "answers in plaintext"},
		{"TLS with an unknown CA", "rediss://" + tlsRedis.Addr() + "/0", "TLS with redis failed"},
		{"not a Redis", "redis://" + strings.TrimPrefix(web.URL, "http://") + "/0", "is this a Redis server?"},
		{"wrong password", "redis://:wrong@" + locked.Addr() + "/0", "WRONGPASS"},
		{"no password", locked.URL(), "NOAUTH"},
		{"database out of range", "redis://" + plain.Addr() + "/99", "DB index is out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			s, err := store.DialRedis(c.url, store.RedisOptions{Timeout: 500 * time.Millisecond})
			if err == nil {
				s.Close()
				t.Fatalf("DialRedis(%s) started", c.url)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("DialRedis(%s): %v, want it to say %q", c.url, err, c.want)
			}
			t.Logf("%v (after %v)", err, time.Since(start).Round(time.Millisecond))
		})
	}
}

// A Redis that asks for a password after a restart (here: set live, and the
// connections dropped) makes calls Unavailable, an outage of this
// allocator, not a rejected request; the probe says so too.
func TestRedisRefusingCredentialsIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s := dialRedis(t, srv.URL(), store.RedisOptions{})
	r := slowRule(t, rules.SlidingLog, 10)
	ctx := t.Context()
	if err := s.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "now-locked-0123").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	// Redis answers NOAUTH, or, to a command of more than ten arguments
	// from a client that has not authenticated, a protocol error: both are
	// credentials refused.
	if _, err := s.Check(ctx, r, "k", 1); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("Check against a Redis that wants a password: %v, want ErrUnavailable naming the credentials", err)
	}
	if err := s.Probe(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Probe: %v, want ErrUnavailable", err)
	}
}
