package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// Settle charges the difference from the estimate once: a cost below it
// gives back what it did not use, one above takes the rest, into debt; a
// second Settle, or one after Cancel, is an error that says so.
func TestSettleChargesTheDifferenceOnce(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	leased(t, c, "slow", "k") // a lease of 10 on a rule of 100 an hour, burst 100: a debt of 100 at most
	remaining := func() int64 {
		t.Helper()
		r, err := c.Reserve(ctx, "slow", "k", 1)
		if err != nil || !r.Allowed {
			t.Fatalf("probe: %+v %v", r, err)
		}
		r.Cancel()
		return r.Remaining + 1
	}

	before := remaining()
	res, err := c.Reserve(ctx, "slow", "k", 3)
	if err != nil || !res.Allowed {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if err := res.Settle(1); err != nil {
		t.Fatal(err)
	}
	if got := remaining(); got != before-1 {
		t.Fatalf("after 3 reserved and 1 settled, %d remain, want %d (2 given back)", got, before-1)
	}
	if err := res.Settle(1); !errors.Is(err, client.ErrReservationDone) || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a second Settle: %v, want ErrReservationDone saying twice", err)
	}
	if got := res.Cancel(); got != 0 {
		t.Fatalf("Cancel after Settle gave back %d", got)
	}
	cancelled, _ := c.Reserve(ctx, "slow", "k", 1)
	cancelled.Cancel()
	if err := cancelled.Settle(5); !errors.Is(err, client.ErrReservationDone) || !strings.Contains(err.Error(), "Cancel") {
		t.Fatalf("Settle after Cancel: %v, want ErrReservationDone saying Cancel", err)
	}
	bad, _ := c.Reserve(ctx, "slow", "k", 1)
	if err := bad.Settle(-1); !errors.Is(err, client.ErrInvalidCost) {
		t.Fatalf("Settle(-1): %v", err)
	}

	// An estimate of 0 exempts the request: nothing decided, nothing charged.
	before = remaining()
	free, err := c.Reserve(ctx, "slow", "k", 0)
	if err != nil || !free.Allowed || free.Settle(50) != nil {
		t.Fatalf("an exempt reservation: %+v %v", free, err)
	}
	if got := remaining(); got != before {
		t.Fatalf("an exempt request settled at 50 charged %d", before-got)
	}

	// Above the estimate by more than the lease holds: the key owes the
	// rest and refuses until refill repays it (100 an hour: 36 s a token).
	over, _ := c.Reserve(ctx, "slow", "k", 1)
	if err := over.Settle(1 + 30); err != nil { // a lease holds 10 at most: a debt of 20 or more
		t.Fatal(err)
	}
	d, err := c.AllowN(ctx, "slow", "k", 1)
	if err != nil || d.Allowed || d.RetryAfter < 12*time.Minute {
		t.Fatalf("a key 20 in debt at 100/h: %+v %v, want refused for 12 minutes or more", d, err)
	}
}

// A strict rule settles in one Acquire: the allocator counts the rest, and
// the next Check sees it.
func TestSettleStrictTakesOneCall(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	res, err := c.Reserve(ctx, "login", "u", 1) // a log of 3 an hour
	if err != nil || !res.Allowed || res.Mode != client.ModeStrict {
		t.Fatalf("reserve: %+v %v", res, err)
	}
	if err := res.Settle(3); err != nil {
		t.Fatal(err)
	}
	if d, err := c.AllowN(ctx, "login", "u", 1); err != nil || d.Allowed {
		t.Fatalf("after a cost of 3 settled on a limit of 3: %+v %v, want refused", d, err)
	}
	// Below the estimate: the allocator counted it, nothing comes back.
	res, _ = c.Reserve(ctx, "login", "v", 2)
	if err := res.Settle(0); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.AllowN(ctx, "login", "v", 2); d.Allowed {
		t.Fatalf("a strict rule gave back a settled cost below its estimate: %+v", d)
	}
}

// A window rule takes no debt unless its file gives it one: what the lease
// cannot pay goes uncounted, and Settle says how much.
func TestSettleWindowWithoutDebt(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	ctx := context.Background()
	var res *client.Reservation
	waitUntil(t, 5*time.Second, func() bool {
		r, err := c.Reserve(ctx, "window", "k", 1)
		res = r
		return err == nil && r.Allowed && r.Mode == client.ModeLease
	}, "a lease on window/k")
	err := res.Settle(100)
	if !errors.Is(err, client.ErrDebtAboveMax) || !strings.Contains(err.Error(), "max_debt 0") {
		t.Fatalf("a window settled far past its lease: %v, want ErrDebtAboveMax naming max_debt 0", err)
	}
}
