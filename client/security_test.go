package client_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/rules"
)

// fleetPKI is a fleet CA, an allocator certificate for 127.0.0.1 in files,
// and a rogue CA.
type fleetPKI struct {
	dir               string
	ca, rogue         *certstest.CA
	caFile            string
	certFile, keyFile string
}

func newFleetPKI(t *testing.T) *fleetPKI {
	t.Helper()
	p := &fleetPKI{dir: t.TempDir(), ca: certstest.NewCA(t, "fleet-ca"), rogue: certstest.NewCA(t, "rogue-ca")}
	p.caFile = p.ca.Write(t, p.dir, "ca.crt")
	p.certFile, p.keyFile = p.ca.Issue(t, certstest.Loopback).Write(t, p.dir, "allocator")
	return p
}

// nodeTLS trusts the fleet CA and presents cert, if any.
func (p *fleetPKI) nodeTLS(t *testing.T, cert *certstest.Leaf) *tls.Config {
	cfg := &tls.Config{RootCAs: p.ca.Pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS(t)}
	}
	return cfg
}

func serveAllocator(t *testing.T, cfg allocator.Config) *allocator.Allocator {
	t.Helper()
	if cfg.Rules == nil {
		set, err := rules.Parse("test", []byte(apiRules))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Rules = set
	}
	a, err := allocator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() { a.Stop(); <-served })
	return a
}

// offlineRules let a node refused by the allocator still decide.
var offlineRules = []client.Rule{{Name: "slow", Algorithm: "token_bucket", Limit: 100, Period: time.Hour}}

// neverLeases drives decisions for a while and fails on any from a lease.
func neverLeases(t *testing.T, c *client.Client, within time.Duration) map[client.Mode]int {
	t.Helper()
	modes := map[client.Mode]int{}
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		d, err := c.AllowN(context.Background(), "slow", "k", 1)
		if err != nil {
			t.Fatalf("%s: %v", c.NodeID(), err)
		}
		if d.Mode == client.ModeLease {
			t.Fatalf("%s decided from a lease: it must not get one", c.NodeID())
		}
		modes[d.Mode]++
	}
	return modes
}

func reachable(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "allot_client_allocator_reachable" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no allot_client_allocator_reachable metric")
	return 0
}

// An mTLS fleet: nodes with a certificate from the fleet CA that names them
// lease; a node with a certificate from another CA, one without a
// certificate, and one whose certificate names another node never do.
func TestMTLSFleet(t *testing.T) {
	p := newFleetPKI(t)
	a := serveAllocator(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile,
		ClientCAFile: p.caFile}})
	for _, id := range []string{"node-1", "node-2"} {
		c := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: id,
			TLS: p.nodeTLS(t, p.ca.Issue(t, certstest.Names{CN: id}))})
		leased(t, c, "slow", "k")
	}
	refused := map[string]*tls.Config{
		"rogue-ca":  p.nodeTLS(t, p.rogue.Issue(t, certstest.Names{CN: "rogue-ca"})),
		"no-cert":   p.nodeTLS(t, nil),
		"impostor":  p.nodeTLS(t, p.ca.Issue(t, certstest.Names{CN: "node-1"})), // node-1's certificate
		"wrong-dns": p.nodeTLS(t, p.ca.Issue(t, certstest.Names{DNS: []string{"someone-else"}})),
	}
	for id, cfg := range refused {
		reg := prometheus.NewRegistry()
		c := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: id, TLS: cfg, Rules: offlineRules,
			StartTimeout: 50 * time.Millisecond, Registerer: reg})
		modes := neverLeases(t, c, 300*time.Millisecond)
		t.Logf("%s: decisions by mode %v, reachable=%v", id, modes, reachable(t, reg))
	}
}

// Without client certificates: TLS and a shared token. A node with the
// token leases, one with another token does not, and a token without TLS is
// refused at New.
func TestTokenFleet(t *testing.T) {
	p := newFleetPKI(t)
	tokens := filepath.Join(p.dir, "tokens")
	if err := os.WriteFile(tokens, []byte("fleet-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := serveAllocator(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, TokenFile: tokens})
	good := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "good", TLS: p.nodeTLS(t, nil),
		Token: "fleet-token-0123456789"})
	leased(t, good, "slow", "k")
	bad := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "bad", TLS: p.nodeTLS(t, nil),
		Token: "guessed-token-012345678", Rules: offlineRules, StartTimeout: 50 * time.Millisecond})
	t.Logf("wrong token: decisions by mode %v", neverLeases(t, bad, 300*time.Millisecond))

	_, err := client.New(client.Config{Allocators: []string{a.Addr()}, Token: "fleet-token-0123456789"})
	if err == nil || !strings.Contains(err.Error(), "Config.Token needs Config.TLS") {
		t.Fatalf("a token without TLS: %v", err)
	}
	_, err = client.New(client.Config{Allocators: []string{a.Addr()}, TLS: p.nodeTLS(t, nil), Token: "two words"})
	if err == nil || !strings.Contains(err.Error(), "Config.Token") {
		t.Fatalf("a token with a space: %v", err)
	}
}

func allocatorCalls(t *testing.T, a *allocator.Allocator, method string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "allot_allocator_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// Allocators found through gossip are used only when their certificate
// verifies against the node's CA: a rogue allocator in an open pool gets no
// call.
func TestGossipAllocatorsMustCarryTheFleetCA(t *testing.T) {
	p := newFleetPKI(t)
	good := serveAllocator(t, allocator.Config{GossipBind: "127.0.0.1:0",
		TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}})
	rogueCert, rogueKey := p.rogue.Issue(t, certstest.Loopback).Write(t, p.dir, "rogue")
	rogue := serveAllocator(t, allocator.Config{GossipBind: "127.0.0.1:0", GossipJoin: []string{good.GossipAddr()},
		TLS: allocator.TLSConfig{CertFile: rogueCert, KeyFile: rogueKey}})
	c := newClient(t, client.Config{NodeID: "n", TLS: p.nodeTLS(t, nil),
		Gossip: &client.GossipConfig{Fast: true, Join: []string{good.GossipAddr()}}})
	leased(t, c, "slow", "k")
	// Several discovery rounds and lease cycles with both in the list.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		c.AllowN(context.Background(), "slow", "k", 1)
		c.AllowN(context.Background(), "login", "k", 1) // strict: a call per decision
	}
	if n := allocatorCalls(t, rogue, "Check") + allocatorCalls(t, rogue, "Acquire") + allocatorCalls(t, rogue, "GetRules"); n != 0 {
		t.Fatalf("the rogue allocator served %v calls", n)
	}
	if n := allocatorCalls(t, good, "Check"); n == 0 {
		t.Fatal("the fleet's allocator served no Check")
	}
}

// With a gossip key, an allocator without it cannot join the pool, so it
// never reaches the nodes' lists; the keyed allocator is found and leases.
func TestGossipKeyKeepsRogueAllocatorsOut(t *testing.T) {
	dir := t.TempDir()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i * 7)
	}
	keyring := filepath.Join(dir, "keyring")
	if err := os.WriteFile(keyring, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := serveAllocator(t, allocator.Config{GossipBind: "127.0.0.1:0", GossipKeyringFile: keyring})
	c := newClient(t, client.Config{NodeID: "n",
		Gossip: &client.GossipConfig{Fast: true, Join: []string{good.GossipAddr()}, Keys: [][]byte{key}}})
	leased(t, c, "slow", "k")

	set, _ := rules.Parse("test", []byte(apiRules))
	_, err := allocator.New(allocator.Config{Rules: set, GossipBind: "127.0.0.1:0", GossipJoin: []string{c.GossipAddr()}})
	if err == nil || !strings.Contains(err.Error(), "gossip") {
		t.Fatalf("an allocator without the key joined the pool: %v", err)
	}
	if _, err := client.New(client.Config{NodeID: "stranger", Rules: offlineRules,
		Gossip: &client.GossipConfig{Fast: true, Join: []string{c.GossipAddr()}}}); err == nil {
		t.Fatal("a node without the key joined the pool")
	}
	if c.Nodes() != 1 {
		t.Fatalf("the node counts %d nodes, want itself only", c.Nodes())
	}
	if err := c.SetGossipKeys([][]byte{key, make([]byte, 16)}); err != nil {
		t.Fatalf("SetGossipKeys: %v", err)
	}
}

// A Redis that asks for a password after a restart is an outage to the
// nodes: the reachable metric drops to 0, open rules fall back, closed
// rules deny (they never admit without the allocator).
func TestRedisAskingForAuthIsAnOutageForNodes(t *testing.T) {
	srv := redistest.Start(t)
	a := serveAllocator(t, allocator.Config{RedisURL: srv.URL()})
	reg := prometheus.NewRegistry()
	c := newClient(t, client.Config{Allocators: []string{a.Addr()}, NodeID: "n", Registerer: reg})
	leased(t, c, "fast", "k")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", "now-locked-0123").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() bool {
		d, err := c.AllowN(ctx, "fast", "k", 1)
		return err == nil && d.Mode == client.ModeFallback
	}, "the open rule in fallback")
	if r := reachable(t, reg); r != 0 {
		t.Fatalf("reachable = %v while every call fails, want 0", r)
	}
	if d, err := c.AllowN(ctx, "login", "k", 1); err != nil || d.Allowed {
		t.Fatalf("closed rule with the allocator unable to serve: %+v %v, want a denial", d, err)
	}
}
