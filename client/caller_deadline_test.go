package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot-dev/allot/client"
)

// pastDeadline is a context whose deadline has passed and whose timer has
// not fired yet, as on a busy machine: Err is nil, Done is still open.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A strict decision whose caller's deadline ran out is the caller's error,
// not a decision without the allocator: gRPC refuses the call past the
// deadline before the context says it is done, and that says nothing of the
// allocator. (Before, a fleet test's run that ended with checks in flight
// counted them as decisions in fallback and denied them on a rule that
// fails closed.)
func TestStrictCallPastTheCallersDeadlineIsTheCallers(t *testing.T) {
	a := memoryAllocator(t, apiRules)
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}})
	if d, err := c.AllowN(context.Background(), "login", "alice", 1); err != nil || d.Mode != client.ModeStrict {
		t.Fatalf("login: %+v %v", d, err)
	}
	d, err := c.AllowN(pastDeadline{context.Background()}, "login", "alice", 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("login past the caller's deadline: %+v %v, want context.DeadlineExceeded", d, err)
	}
	if d, err := c.AllowN(context.Background(), "login", "alice", 1); err != nil || d.Mode != client.ModeStrict || d.Remaining != 1 {
		t.Fatalf("login after: %+v %v, want strict with 1 left", d, err)
	}
}
