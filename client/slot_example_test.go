package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot-dev/allot/client"
)

// A concurrency rule limits a key's requests in flight: take a slot for
// the work, give it back when the work ends. A refusal says when to try
// again.
func ExampleClient_TakeSlot() {
	c, err := client.New(client.Config{Rules: []client.Rule{
		{Name: "reports-in-flight", Algorithm: "concurrency", Limit: 2, MaxHold: 500 * time.Millisecond, LeaseTTL: time.Second},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	a, _ := c.TakeSlot(ctx, "reports-in-flight", "tenant-7")
	b, _ := c.TakeSlot(ctx, "reports-in-flight", "tenant-7")
	_, err = c.TakeSlot(ctx, "reports-in-flight", "tenant-7")
	var refused *client.SlotError
	fmt.Println(errors.Is(err, client.ErrNoSlot), errors.As(err, &refused) && refused.RetryAfter > 0)
	a.Release() // the work is done: the slot goes back
	s, err := c.TakeSlot(ctx, "reports-in-flight", "tenant-7")
	fmt.Println(err, s.Mode())
	s.Release()
	b.Release()
	// Output:
	// true true
	// <nil> fallback
}
