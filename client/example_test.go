package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// exampleAllocator runs an allocator with the built-in example rules on a
// free loopback port, as `go run ./cmd/allocator` does on 127.0.0.1:7070.
func exampleAllocator() (addr string, stop func()) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := allocator.New(allocator.Config{Rules: rules.Example(), Logger: quiet})
	if err != nil {
		panic(err)
	}
	go a.Serve()
	return a.Addr(), a.Stop
}

func Example() {
	addr, stop := exampleAllocator()
	defer stop()

	c, err := client.New(client.Config{Allocators: []string{addr}, NodeID: "web-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// api-per-key: 1,000 a minute in bursts of 200. Until its first lease
	// arrives a new key is served from this node's fallback allowance.
	ctx := context.Background()
	admitted := 0
	for range 250 {
		if c.Allow(ctx, "api-per-key", "key-123") {
			admitted++
		}
	}
	fmt.Println("admitted at most the burst:", admitted <= 200)
	// Output: admitted at most the burst: true
}

func ExampleClient_AllowN() {
	addr, stop := exampleAllocator()
	defer stop()
	c, _ := client.New(client.Config{Allocators: []string{addr}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer c.Close()

	// login-attempts is a sliding log: strict, decided by the allocator.
	ctx := context.Background()
	for i := range 6 {
		d, err := c.AllowN(ctx, "login-attempts", "alice", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("attempt %d: allowed=%v remaining=%d mode=%v retry-after>14m=%v\n",
			i+1, d.Allowed, d.Remaining, d.Mode, d.RetryAfter > 14*time.Minute)
	}
	// Output:
	// attempt 1: allowed=true remaining=4 mode=strict retry-after>14m=false
	// attempt 2: allowed=true remaining=3 mode=strict retry-after>14m=false
	// attempt 3: allowed=true remaining=2 mode=strict retry-after>14m=false
	// attempt 4: allowed=true remaining=1 mode=strict retry-after>14m=false
	// attempt 5: allowed=true remaining=0 mode=strict retry-after>14m=false
	// attempt 6: allowed=false remaining=0 mode=strict retry-after>14m=true
}

func ExampleClient_AllowAll() {
	// A node can start with rules of its own and no allocator at all: it
	// then decides from its fallback allowance, limit/N.
	c, _ := client.New(client.Config{
		Allocators: []string{"127.0.0.1:1"}, Nodes: 1, StartTimeout: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rules: []client.Rule{
			{Name: "per-second", Algorithm: "token_bucket", Limit: 10, Period: time.Second},
			{Name: "per-hour", Algorithm: "token_bucket", Limit: 3, Period: time.Hour},
		},
	})
	defer c.Close()

	// "10 per second AND 3 per hour": a request refused by one rule costs
	// nothing on the other.
	ctx := context.Background()
	for i := range 4 {
		d, _ := c.AllowAll(ctx, 1,
			client.RuleKey{Rule: "per-second", Key: "bob"},
			client.RuleKey{Rule: "per-hour", Key: "bob"})
		fmt.Printf("request %d: allowed=%v\n", i+1, d.Allowed)
	}
	d, _ := c.AllowN(ctx, "per-second", "bob", 7)
	fmt.Println("per-second still holds 7:", d.Allowed)
	// Output:
	// request 1: allowed=true
	// request 2: allowed=true
	// request 3: allowed=true
	// request 4: allowed=false
	// per-second still holds 7: true
}
