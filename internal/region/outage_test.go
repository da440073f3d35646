package region

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// TestParentOutage: a region whose parent stops lends its global key only
// what its lease holds, until that lease ends, and then nothing: its node,
// answered by the region, neither falls back nor admits. Once the parent
// is back on its address the region leases again and the node admits.
func TestParentOutage(t *testing.T) {
	set, err := rules.Parse("tree.yaml", []byte(treeRules))
	if err != nil {
		t.Fatal(err)
	}
	parentStore := store.NewMemory(clock.Real())
	defer parentStore.Close()
	srv, err := server.New(server.Config{Store: parentStore, Rules: set, Logger: quiet, NewKeysPerNode: -1, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	parent := grpc.NewServer()
	srv.Register(parent)
	go parent.Serve(lis)

	local := store.NewMemory(clock.Real())
	t.Cleanup(func() { local.Close() })
	rs, err := New(Config{Name: "region-a", Parent: addr, Local: local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	node, err := client.New(client.Config{Allocators: []string{serve(t, rs, set)}, NodeID: "n1", Registerer: prometheus.NewRegistry(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })

	start := time.Now()
	var admitted [40]atomic.Int64 // per 100 ms
	var fallback atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Since(start) < 4*time.Second {
			d, err := node.AllowN(context.Background(), "g", "k", 1)
			if err == nil && d.Allowed {
				admitted[min(int(time.Since(start)/(100*time.Millisecond)), len(admitted)-1)].Add(1)
				if d.Mode == client.ModeFallback {
					fallback.Add(1)
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	time.Sleep(time.Second)
	parent.Stop() // the parent goes at 1 s
	stopped := time.Since(start)
	time.Sleep(1500 * time.Millisecond)
	lis, err = net.Listen("tcp", addr) // and comes back on its address at 2.5 s
	if err != nil {
		t.Fatalf("the parent's address: %v", err)
	}
	parent = grpc.NewServer()
	srv.Register(parent)
	go parent.Serve(lis)
	defer parent.Stop()
	back := time.Since(start)
	<-done

	sum := func(from, to time.Duration) (n int64) {
		for i := int(from / (100 * time.Millisecond)); i < int(to/(100*time.Millisecond)) && i < len(admitted); i++ {
			n += admitted[i].Load()
		}
		return n
	}
	// The region's lease ends at most its TTL (1 s) after the parent
	// stopped; the bucket after that must be empty until the parent is
	// back.
	dark := sum(stopped+time.Second+100*time.Millisecond, back)
	t.Logf("admitted: before the stop %d, in the parent's outage %d (after the region's lease could end: %d), after it came back %d",
		sum(0, stopped), sum(stopped, back), dark, sum(back, 4*time.Second))
	if dark != 0 {
		t.Errorf("%d admitted after the region's lease ended, with the parent down", dark)
	}
	if fallback.Load() != 0 {
		t.Errorf("%d admitted on fallback while the region answered", fallback.Load())
	}
	if n := sum(3500*time.Millisecond, 4*time.Second); n == 0 {
		t.Errorf("nothing admitted a second after the parent came back")
	}
	if n := sum(0, stopped); n == 0 {
		t.Errorf("nothing admitted before the outage")
	}
}
