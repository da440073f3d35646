package allocator_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

const adminFleetRules = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 100
    period: 1s
    lease: { ttl: 1s, refresh: 100ms }
`

// adminFleet is an allocator on a dedicated Redis, over TLS with fleet and
// admin tokens, and nodes that dial it.
type adminFleet struct {
	t      *testing.T
	p      *pki
	cfg    allocator.Config
	alloc  *allocator.Allocator
	served chan error
	nodes  []*client.Client
	calls  []*callLog // each node's calls to the allocator
}

// callLog records a node's calls to the allocator: what it asked when,
// and the rules version each Acquire answer carried.
type callLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	method     string
	sent, done time.Time
	version    string // an Acquire answer's rules version
}

func (l *callLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := call{method: path.Base(method), sent: time.Now()}
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.done = time.Now()
	if r, ok := reply.(*allotv1.AcquireResponse); ok && err == nil {
		c.version = r.GetRulesVersion()
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return err
}

func (l *callLog) snapshot() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// learnedFrom checks, in node i's calls, how it came to the rules version
// v set at set: the first Acquire it sent after the set's answer carries
// v, and it fetches the rules once an answer has brought v.
func learnedFrom(t *testing.T, i int, calls []call, set time.Time, v string) {
	t.Helper()
	var learned time.Time
	for _, c := range calls {
		if c.method != "Acquire" || c.version == "" {
			continue
		}
		if c.sent.After(set) && c.version != v && learned.IsZero() {
			t.Errorf("node %d: an Acquire sent %v after the override was set was answered with rules version %s, want %s",
				i, c.sent.Sub(set), c.version, v)
		}
		if c.version == v && (learned.IsZero() || c.done.Before(learned)) {
			learned = c.done
		}
	}
	if learned.IsZero() {
		t.Errorf("node %d: no Acquire answer brought rules version %s", i, v)
		return
	}
	for _, c := range calls {
		if c.method == "GetRules" && !c.sent.Before(learned) {
			return
		}
	}
	t.Errorf("node %d: never fetched the rules after an Acquire answer brought version %s", i, v)
}

func newAdminFleet(t *testing.T, nodes int) *adminFleet {
	t.Helper()
	set, err := rules.Parse("fleet.yaml", []byte(adminFleetRules))
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	f := &adminFleet{t: t, p: p, cfg: allocator.Config{Listen: "127.0.0.1:0", Rules: set, RedisURL: redistest.Start(t).URL(),
		StoreTimeout: time.Second, TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile},
		TokenFile:      writeFile(t, filepath.Join(p.dir, "tokens"), fleetToken+"\n"),
		AdminTokenFile: writeFile(t, filepath.Join(p.dir, "admin-tokens"), "support "+adminToken+"\n")}}
	f.start()
	f.cfg.Listen = f.alloc.Addr() // a restart comes back where the nodes dial
	t.Cleanup(f.stop)
	for i := range nodes {
		log := &callLog{}
		n, err := client.New(client.Config{Allocators: []string{f.cfg.Listen}, NodeID: fmt.Sprintf("node-%d", i), Nodes: nodes,
			TLS: &tls.Config{RootCAs: p.ca.Pool()}, Token: fleetToken, Registerer: prometheus.NewRegistry(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.intercept)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		f.nodes, f.calls = append(f.nodes, n), append(f.calls, log)
	}
	return f
}

func (f *adminFleet) start() {
	f.t.Helper()
	a, err := allocator.New(f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.alloc, f.served = a, make(chan error, 1)
	go func() { f.served <- a.Serve() }()
}

func (f *adminFleet) stop() {
	if f.alloc == nil {
		return
	}
	f.alloc.Stop()
	<-f.served
	f.alloc = nil
}

func (f *adminFleet) admin(opts ...grpc.DialOption) allotv1.AdminClient {
	return allotv1.NewAdminClient(f.p.dialTLS(f.t, f.cfg.Listen, nil, opts...))
}

// drive keeps key busy on every node (so that each renews its lease every
// refresh) and records, per node, when its decisions first carried limit.
func (f *adminFleet) drive(ctx context.Context, key string, limit int64) (s *sightings, wait func()) {
	s = &sightings{at: make([]time.Time, len(f.nodes))}
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if d, err := n.AllowN(ctx, "api", key, 1); err == nil && d.Limit == limit {
					s.saw(i)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return s, wg.Wait
}

// sightings are when each node first decided by a limit.
type sightings struct {
	mu sync.Mutex
	at []time.Time
}

func (s *sightings) saw(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at[i].IsZero() {
		s.at[i] = time.Now()
	}
}

// all is when each node first decided by the limit, once every node has.
func (s *sightings) all() ([]time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at), !slices.ContainsFunc(s.at, time.Time.IsZero)
}

func (s *sightings) done() bool { _, ok := s.all(); return ok }

// The must-show of the Admin API: an override set through it is applied
// by every node of an 8-node fleet within about one lease refresh, judged
// by the limit the nodes' own decisions carry; it survives an allocator
// restart on the same Redis, served from the first call and under the
// same rules version, so the nodes need not fetch again; and the fleet's
// token does not change it.
func TestAdminOverrideReachesEightNodesAndSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet run")
	}
	f := newAdminFleet(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()

	// Every node on leases first, at the rule's limit.
	before, waitBefore := f.drive(ctx, "tenant-42", 100)
	waitUntil(t, 5*time.Second, before.done, "every node to decide by the rule")

	if _, err := f.admin(grpc.WithPerRPCCredentials(bearer(fleetToken))).SetOverride(call, &allotv1.SetOverrideRequest{Rule: "api", Key: "tenant-42", Limit: 1000}); code(err) != codes.Unauthenticated {
		t.Fatalf("SetOverride with the fleet's token: %v, want Unauthenticated", err)
	}
	admin := f.admin(grpc.WithPerRPCCredentials(bearer(adminToken)))
	seen, wait := f.drive(ctx, "tenant-42", 1000)
	sent := time.Now()
	set, err := admin.SetOverride(call, &allotv1.SetOverrideRequest{Rule: "api", Key: "tenant-42", Limit: 1000,
		Ttl: durationpb.New(time.Hour), Note: "must-show"})
	if err != nil {
		t.Fatal(err)
	}
	setDone := time.Now()
	waitUntil(t, 5*time.Second, seen.done, "every node to decide by the override")
	const refresh = 100 * time.Millisecond
	var worst time.Duration
	at, _ := seen.all()
	after := make([]string, len(at))
	for i, at := range at {
		d := max(at.Sub(sent), 0)
		worst = max(worst, d)
		after[i] = fmt.Sprintf("%.2f", d.Seconds()/refresh.Seconds())
	}
	t.Logf("every node applied the override within %v (%.2f lease refreshes of %v); per node, in refreshes: %v",
		worst.Round(time.Millisecond), worst.Seconds()/refresh.Seconds(), refresh, after)
	// A node learns the new rules version from its key's next lease call,
	// which the lease sends within a refresh of the last (renewals drawn
	// over 0.8-1 refresh, a short key's retries within its wait), then
	// fetches the rules (one GetRules round trip) and applies the override
	// from its next decision: 0.95-1.11 refresh on a quiet machine. A node
	// refused just before asks again only after the wait it was told (up to
	// half the bucket's fill time, 500 ms here), and how long the steps take
	// is the machine's (with the race detector and a loaded machine, one
	// node's next Acquire came 440 ms after its last: 5.2 refreshes), so
	// the figure is reported, and what is the fleet's is checked in each
	// node's calls: every Acquire sent after the set is answered with the
	// new version, and the node fetches the rules once one has brought it.
	for i, l := range f.calls {
		learnedFrom(t, i, l.snapshot(), setDone, set.RulesVersion)
	}

	version := set.RulesVersion
	f.stop()
	f.start()
	if r, _ := f.alloc.Rules().Get("api"); r.ForKey("tenant-42").Limit != 1000 || f.alloc.Rules().Version() != version {
		t.Fatalf("after a restart: limit %d under version %s, want the override's 1000 under %s", r.ForKey("tenant-42").Limit, f.alloc.Rules().Version(), version)
	}
	got, err := admin.GetOverride(call, &allotv1.GetOverrideRequest{Rule: "api", Key: "tenant-42"})
	if err != nil || got.Override.Note != "must-show" || got.Override.SetBy != "token:support" || got.Effective.Source != "api" {
		t.Fatalf("GetOverride after a restart: %v %v", got, err)
	}
	// The nodes, back on leases from the new allocator, still decide by it.
	restarted, waitRestarted := f.drive(ctx, "tenant-42", 1000)
	waitUntil(t, 5*time.Second, restarted.done, "every node to decide by the override after the restart")
	for i, n := range f.nodes {
		if d, err := n.AllowN(ctx, "api", "tenant-42", 1); err != nil || d.Mode != client.ModeLease || d.Limit != 1000 {
			t.Errorf("node %d after the restart: %+v %v, want a lease decision under limit 1000", i, d, err)
		}
	}
	cancel()
	waitBefore()
	wait()
	waitRestarted()
}

// Two allocators on one Redis: a change made on one is served by the
// other within its poll, and a deletion on the other reaches the first.
func TestAdminChangeReachesEveryAllocator(t *testing.T) {
	f := newAdminFleet(t, 0)
	other := f.cfg
	other.Listen = "127.0.0.1:0"
	b := serve(t, other)
	bAdmin := allotv1.NewAdminClient(f.p.dialTLS(t, b.Addr(), nil, grpc.WithPerRPCCredentials(bearer(adminToken))))
	admin := f.admin(grpc.WithPerRPCCredentials(bearer(adminToken)))
	ctx := ctx(t)

	sent := time.Now()
	if _, err := admin.SetOverride(ctx, &allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 7}); err != nil {
		t.Fatal(err)
	}
	limitOn := func(a *allocator.Allocator) int64 { r, _ := a.Rules().Get("api"); return r.ForKey("k").Limit }
	waitUntil(t, 5*time.Second, func() bool { return limitOn(b) == 7 }, "the other allocator to serve the override")
	t.Logf("the other allocator served the override %v after it was set (poll 100ms)", time.Since(sent).Round(time.Millisecond))
	if f.alloc.Rules().Version() != b.Rules().Version() {
		t.Errorf("allocators sharing a store serve versions %s and %s", f.alloc.Rules().Version(), b.Rules().Version())
	}
	if _, err := bAdmin.DeleteOverride(ctx, &allotv1.DeleteOverrideRequest{Rule: "api", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, func() bool { return limitOn(f.alloc) == 100 }, "the first allocator to drop the deleted override")
}

// waitUntil polls cond until it holds, or fails the test after within.
func waitUntil(t testing.TB, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}
