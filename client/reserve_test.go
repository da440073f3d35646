package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/clienthook"
	"github.com/allot-dev/allot/internal/clock"
)

// A cancelled reservation gives back exactly what it took, once; a refused
// one and a strict rule's give back nothing.
func TestReserveCancelGivesBackWhatItTook(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(t, c, "slow", "k") // a lease of 10 on a rule of 100 an hour
	before, err := c.AllowN(ctx, "slow", "k", 1)
	if err != nil || before.Mode != client.ModeLease {
		t.Fatalf("%+v %v", before, err)
	}
	res, err := c.Reserve(ctx, "slow", "k", 3)
	if err != nil || !res.Allowed || res.Remaining != before.Remaining-3 {
		t.Fatalf("reserve: %+v %v, want 3 taken from %d", res, err, before.Remaining)
	}
	if got := res.Cancel(); got != 3 {
		t.Fatalf("Cancel gave back %d, want 3", got)
	}
	if got := res.Cancel(); got != 0 {
		t.Fatalf("a second Cancel gave back %d, want 0", got)
	}
	after, _ := c.AllowN(ctx, "slow", "k", 1)
	if after.Remaining != before.Remaining-1 {
		t.Fatalf("after the refund %d remain, want %d: no more and no less than was taken", after.Remaining, before.Remaining-1)
	}
	// More than the lease holds: refused, and a refusal took nothing.
	big, err := c.Reserve(ctx, "slow", "k", 50)
	if err != nil || big.Allowed || big.Cancel() != 0 {
		t.Fatalf("a refused reservation: %+v %v; it must give back nothing", big, err)
	}
	// A strict rule: the allocator counted the request; nothing to give back.
	strict, err := c.Reserve(ctx, "login", "u", 1)
	if err != nil || !strict.Allowed || strict.Mode != client.ModeStrict || strict.Cancel() != 0 {
		t.Fatalf("strict: %+v %v; Cancel must give back nothing", strict, err)
	}
	// Through a handle: the same.
	l, err := c.Limiter("slow")
	if err != nil {
		t.Fatal(err)
	}
	hr, err := l.Reserve(ctx, "k", 2)
	if err != nil || !hr.Allowed || hr.Cancel() != 2 {
		t.Fatalf("a handle's reservation: %+v %v", hr, err)
	}
}

// Tokens taken from a lease that has ended since are gone: a Cancel then
// puts nothing into the next lease.
func TestCancelAfterTheLeaseEndedGivesNothing(t *testing.T) {
	a := memoryAllocator(t, `
rules:
  - name: tiny
    algorithm: token_bucket
    limit: 10
    period: 1h
    lease: { min: 10, max: 10, ttl: 1s }
`)
	clk := clock.NewFake(time.Now())
	cfg := client.Config{Allocators: []string{a.Addr()}}
	clienthook.SetClock(&cfg, clk)
	c := newClient(t, cfg)
	ctx := context.Background()
	var res *client.Reservation
	waitUntil(t, 5*time.Second, func() bool {
		clk.Advance(time.Millisecond) // the manager's paced calls run on the fake clock
		r, err := c.Reserve(ctx, "tiny", "k", 1)
		if err == nil && r.Allowed && r.Mode == client.ModeLease {
			res = r
			return true
		}
		if r != nil {
			r.Cancel()
		}
		return false
	}, "a lease")
	clk.Advance(2 * time.Second) // the lease ends; the bucket (10 an hour) has nothing more to lend
	waitUntil(t, 5*time.Second, func() bool {
		d, err := c.AllowN(ctx, "tiny", "k", 1)
		return err == nil && !d.Allowed
	}, "the ended lease's tokens to leave")
	if got := res.Cancel(); got != 0 {
		t.Fatalf("Cancel after the lease ended gave back %d, want 0", got)
	}
	if d, _ := c.AllowN(ctx, "tiny", "k", 1); d.Allowed {
		t.Fatalf("a token was admitted after the cancel: %+v", d)
	}
}

func TestLimiterHandle(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	if _, err := c.Limiter("nope"); !errors.Is(err, client.ErrUnknownRule) {
		t.Fatalf("an unknown rule's handle: %v, want ErrUnknownRule at creation", err)
	}
	l, err := c.Limiter("slow")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leased(t, c, "slow", "k")
	if !l.Allow(ctx, "k") {
		t.Fatal("the handle refused a leased key")
	}
	d, err := l.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed || d.Rule != "slow" {
		t.Fatalf("%+v %v", d, err)
	}
	if _, err := l.AllowN(ctx, "", 1); !errors.Is(err, client.ErrInvalidKey) {
		t.Fatalf("a bad key through the handle: %v", err)
	}
	c.Close()
	if l.Allow(ctx, "k") {
		t.Fatal("a closed client's handle admitted")
	}
}
