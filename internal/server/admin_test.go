package server_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

const adminRules = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 1000
    period: 1m
    burst: 200
    overrides:
      - key: tenant-42
        limit: 10000
  - name: hourly
    algorithm: fixed_window
    limit: 500
    period: 1h
`

type adminRig struct {
	admin   allotv1.AdminClient
	alloc   allotv1.AllocatorClient
	srv     *server.Server
	overlay *server.Overlay
	clk     *clock.Fake
}

// serveAdmin runs the Allocator and Admin services over real gRPC on
// 127.0.0.1, on in-process overrides and an injected clock.
func serveAdmin(t *testing.T, ovs store.Overrides) *adminRig {
	t.Helper()
	set, err := rules.Parse("admin.yaml", []byte(adminRules))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	srv, err := server.New(server.Config{Store: memory(t), Rules: set, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	o := server.NewOverlay(srv, ovs, set)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(server.WithCaller(ctx, "token:test"), req)
	}))
	srv.Register(g)
	server.NewAdmin(srv, o).Register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &adminRig{admin: allotv1.NewAdminClient(conn), alloc: allotv1.NewAllocatorClient(conn), srv: srv, overlay: o, clk: clk}
}

// Bad input is InvalidArgument naming the field; an unknown rule, or a
// key without an override, NotFound.
func TestAdminRefusesBadInput(t *testing.T) {
	rig := serveAdmin(t, store.NewMemoryOverrides())
	c := ctx(t)
	soon := timestamppb.New(rig.clk.Now().Add(-time.Second))
	for _, tc := range []struct {
		req   *allotv1.SetOverrideRequest
		code  codes.Code
		field string
	}{
		{&allotv1.SetOverrideRequest{Rule: "", Key: "k", Limit: 1}, codes.InvalidArgument, "rule"},
		{&allotv1.SetOverrideRequest{Rule: "nope", Key: "k", Limit: 1}, codes.NotFound, "nope"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "", Limit: 1}, codes.InvalidArgument, "key"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 0}, codes.InvalidArgument, "limit"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, Burst: -2}, codes.InvalidArgument, "burst"},
		{&allotv1.SetOverrideRequest{Rule: "hourly", Key: "k", Limit: 5, Burst: 5}, codes.InvalidArgument, "burst"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, Period: durationpb.New(time.Second)}, codes.InvalidArgument, "period"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, Ttl: durationpb.New(-time.Second)}, codes.InvalidArgument, "ttl"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, Ttl: durationpb.New(time.Second), ExpiresAt: soon}, codes.InvalidArgument, "ttl"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, ExpiresAt: soon}, codes.InvalidArgument, "expires_at"},
		{&allotv1.SetOverrideRequest{Rule: "api", Key: "k", Limit: 5, Note: string(make([]byte, 300))}, codes.InvalidArgument, "note"},
	} {
		_, err := rig.admin.SetOverride(c, tc.req)
		wantStatus(t, err, tc.code, tc.field)
	}
	_, err := rig.admin.GetOverride(c, &allotv1.GetOverrideRequest{Rule: "api", Key: "tenant-42"})
	wantStatus(t, err, codes.NotFound, "file")
	_, err = rig.admin.DeleteOverride(c, &allotv1.DeleteOverrideRequest{Rule: "api", Key: "k"})
	wantStatus(t, err, codes.NotFound, "k")
	_, err = rig.admin.ListOverrides(c, &allotv1.ListOverridesRequest{Rule: "api", PageSize: 5000})
	wantStatus(t, err, codes.InvalidArgument, "page_size")
	_, err = rig.admin.ListOverrides(c, &allotv1.ListOverridesRequest{Rule: "api", PageToken: "!!"})
	wantStatus(t, err, codes.InvalidArgument, "page_token")
	_, err = rig.admin.ListOverrides(c, &allotv1.ListOverridesRequest{Rule: "nope"})
	wantStatus(t, err, codes.NotFound, "nope")
}

// An override set through the API is served at once: GetRules carries it
// under a new rules version, and Check decides the key by it; it expires
// on the injected clock, the file's override of the key applies again,
// and the expired override is deleted from the store.
func TestAdminOverrideLifecycle(t *testing.T) {
	ovs := store.NewMemoryOverrides()
	rig := serveAdmin(t, ovs)
	c := ctx(t)
	before := rig.srv.Rules().Version()
	set, err := rig.admin.SetOverride(c, &allotv1.SetOverrideRequest{Rule: "api", Key: "tenant-42", Limit: 60,
		Ttl: durationpb.New(time.Minute), Note: "ticket 7"})
	if err != nil {
		t.Fatal(err)
	}
	if set.RulesVersion == before || set.Override.Burst != 12 || set.Override.SetBy != "token:test" {
		t.Fatalf("set: %v (rules version before %s): want a new version, the scaled burst 12 and the caller", set, before)
	}
	got, err := rig.admin.GetOverride(c, &allotv1.GetOverrideRequest{Rule: "api", Key: "tenant-42"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Effective.Source != "api" || got.Effective.Limit != 60 || got.Override.Note != "ticket 7" {
		t.Fatalf("get: %v", got)
	}
	rs, err := rig.alloc.GetRules(c, &allotv1.GetRulesRequest{})
	if err != nil || rs.Version != set.RulesVersion {
		t.Fatalf("GetRules: version %s, %v; want %s", rs.GetVersion(), err, set.RulesVersion)
	}
	for i := range 13 {
		d, err := rig.alloc.Check(c, &allotv1.CheckRequest{Rule: "api", Key: "tenant-42"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 12) || d.Limit != 60 {
			t.Fatalf("check %d: %v, want the override's burst of 12 (limit 60)", i, d)
		}
	}

	rig.clk.Advance(time.Minute)
	if err := rig.overlay.Sync(c); err != nil {
		t.Fatal(err)
	}
	if r, _ := rig.srv.Rules().Get("api"); r.ForKey("tenant-42").Limit != 10000 {
		t.Fatalf("after expiry: limit %d, want the file's 10000", r.ForKey("tenant-42").Limit)
	}
	if rig.srv.Rules().Version() != before {
		t.Error("after expiry the rules version is not the file's again")
	}
	if _, list, _ := ovs.LoadOverrides(c, "api"); len(list) != 0 {
		t.Errorf("the expired override is still in the store: %v", list)
	}
	_, err = rig.admin.GetOverride(c, &allotv1.GetOverrideRequest{Rule: "api", Key: "tenant-42"})
	wantStatus(t, err, codes.NotFound, "limit 10000")
}

// ListOverrides pages through a rule's overrides in key order; a deleted
// one is gone from the list and from the rules served.
func TestAdminListAndDelete(t *testing.T) {
	rig := serveAdmin(t, store.NewMemoryOverrides())
	c := ctx(t)
	keys := []string{"e", "a", "d", "c", "b"}
	for i, k := range keys {
		if _, err := rig.admin.SetOverride(c, &allotv1.SetOverrideRequest{Rule: "hourly", Key: k, Limit: int64(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	var listed []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := rig.admin.ListOverrides(c, &allotv1.ListOverridesRequest{Rule: "hourly", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.Overrides {
			listed = append(listed, o.Key)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("the pages never end")
		}
	}
	if want := "a b c d e"; strings.Join(listed, " ") != want {
		t.Fatalf("listed %q, want %q", strings.Join(listed, " "), want)
	}
	del, err := rig.admin.DeleteOverride(c, &allotv1.DeleteOverrideRequest{Rule: "hourly", Key: "c"})
	if err != nil || del.Override.Limit != 103 {
		t.Fatalf("delete: %v %v", del, err)
	}
	if r, _ := rig.srv.Rules().Get("hourly"); r.ForKey("c").Limit != 500 {
		t.Errorf("after delete: limit %d, want the rule's 500", r.ForKey("c").Limit)
	}
	resp, err := rig.admin.ListOverrides(c, &allotv1.ListOverridesRequest{Rule: "hourly"})
	if err != nil || len(resp.Overrides) != 4 || resp.NextPageToken != "" {
		t.Fatalf("list after delete: %v %v", resp, err)
	}
}
