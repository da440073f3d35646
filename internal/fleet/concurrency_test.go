package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"

	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/client"
)

// The concurrency rule's promises, on a real allocator and Redis: never
// more than the limit in flight across the fleet, counted by the test, at
// ≥ 0.95 of what the limit allows under 10× demand; and a node killed
// while it holds slots holds them until its lease ends, no longer.

const (
	slotLimit = 20
	slotTTL   = time.Second
	// slotRule: a TTL of a second (a crash costs at most that), max_hold
	// half of it, renewed every 100ms.
	slotRule = "  - name: r\n    algorithm: concurrency\n    limit: 20\n    lease: { ttl: 1s }\n"
)

// inFlight counts the handlers running, fleet-wide, and the most at once.
type inFlight struct {
	now, most atomic.Int64
	mu        sync.Mutex
	holds     [][2]time.Duration // each hold's start and end, since the run began
}

func (f *inFlight) enter() {
	n := f.now.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
}

// busy is the slot-time the handlers held within [from, to).
func (f *inFlight) busy(from, to time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sum time.Duration
	for _, h := range f.holds {
		sum += max(0, min(h[1], to)-max(h[0], from))
	}
	return sum
}

// worker takes a slot, holds it 20–80 ms, gives it back, and again;
// refused, it waits a millisecond (its demand never lets a slot idle
// long), or less than the RetryAfter it was told when that is shorter.
func worker(ctx context.Context, c *client.Client, rule string, fl *inFlight, t0 time.Time, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for ctx.Err() == nil {
		s, err := c.TakeSlot(ctx, rule, "k")
		if err != nil {
			wait := time.Millisecond
			var se *client.SlotError
			if errors.As(err, &se) {
				wait = min(wait, se.RetryAfter)
			}
			time.Sleep(wait)
			continue
		}
		fl.enter()
		start := time.Since(t0)
		time.Sleep(time.Duration(20+rng.IntN(61)) * time.Millisecond)
		end := time.Since(t0)
		fl.now.Add(-1)
		s.Release()
		fl.mu.Lock()
		fl.holds = append(fl.holds, [2]time.Duration{start, end})
		fl.mu.Unlock()
	}
}

func TestConcurrencyFleet(t *testing.T) {
	f := newFleet(t, spec{rule: slotRule})
	const perNode = 10 * slotLimit / nodes // 10× demand: 200 callers for 20 slots
	const run, warm = 6 * time.Second, time.Second
	fl := &inFlight{}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, sl := range f.slots {
		for j := range perNode {
			wg.Go(func() { worker(ctx, sl.c, f.rule.Name, fl, t0, uint64(i*1000+j)) })
		}
	}
	wg.Wait()
	end := time.Since(t0)
	util := float64(fl.busy(warm, end)) / float64(slotLimit*(end-warm))
	t.Logf("8 nodes, %d callers, %d slots: %d holds, most in flight at once %d, slot-time used %.3f of the limit's (after %v)",
		nodes*perNode, slotLimit, len(fl.holds), fl.most.Load(), util, warm)
	if m := fl.most.Load(); m > slotLimit {
		t.Errorf("%d handlers in flight at once, fleet-wide: above the limit of %d", m, slotLimit)
	}
	if util < 0.95 {
		t.Errorf("slot-time used %.3f of the limit's, want ≥ 0.95", util)
	}
}

// A node that dies holding slots: the others get them back when its lease
// ends, within a TTL (and the renewal that finds them, a refresh).
func TestConcurrencyCrash(t *testing.T) {
	f := newFleet(t, spec{rule: slotRule})
	holder := startSlotHolder(t, f.child.alloc, f.rule.Name, slotLimit/2)
	fl := &inFlight{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, sl := range f.slots {
		for j := range 10 * slotLimit / nodes {
			wg.Go(func() { worker(ctx, sl.c, f.rule.Name, fl, t0, uint64(i*1000+j)) })
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if m := fl.most.Load(); m > slotLimit-slotLimit/2 {
		t.Fatalf("%d in flight beside a node holding %d of %d", m, slotLimit/2, slotLimit)
	}
	killed := time.Since(t0)
	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	fl.most.Store(0)
	back := time.Duration(-1)
	for deadline := time.Now().Add(3 * slotTTL); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if fl.now.Load() == slotLimit {
			back = time.Since(t0) - killed
			break
		}
	}
	cancel()
	wg.Wait()
	bound := slotTTL + f.rule.Lease.Refresh + 150*time.Millisecond
	t.Logf("node killed holding %d slots: all %d in flight again %v later (TTL %v, bound %v); most in flight after %d",
		slotLimit/2, slotLimit, back, slotTTL, bound, fl.most.Load())
	if back < 0 || back > bound {
		t.Errorf("capacity back %v after the kill, want within %v", back, bound)
	}
	if m := fl.most.Load(); m > slotLimit {
		t.Errorf("%d in flight after the kill, above %d", m, slotLimit)
	}
}

// The slot holder is the test binary run with slotHolderEnv: a node that
// takes n slots and holds them until it is killed.
const (
	slotHolderEnv = "ALLOT_FLEET_SLOT_HOLDER" // allocator,rule,n
	slotsHeld     = "holding slots"
)

func serveSlotHolder() error {
	parts := strings.Split(os.Getenv(slotHolderEnv), ",")
	if len(parts) != 3 {
		return fmt.Errorf("%s=%q: want allocator,rule,n", slotHolderEnv, os.Getenv(slotHolderEnv))
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return err
	}
	c, err := client.New(client.Config{Allocators: []string{parts[0]}, NodeID: "holder", Logger: quiet,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	var held []*client.Slot
	for deadline := time.Now().Add(10 * time.Second); len(held) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("holder: %d slots of %d in 10s", len(held), n)
		}
		if s, err := c.TakeSlot(context.Background(), parts[1], "k"); err == nil {
			held = append(held, s)
		}
	}
	fmt.Println(slotsHeld, len(held))
	select {} // until killed
}

func startSlotHolder(t *testing.T, alloc, rule string, n int) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), slotHolderEnv+"="+strings.Join([]string{alloc, rule, strconv.Itoa(n)}, ","))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), slotsHeld) {
			return cmd
		}
	}
	t.Fatalf("slot holder exited before holding its slots")
	return nil
}
