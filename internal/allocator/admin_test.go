package allocator_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
)

const (
	fleetToken = "fleet-token-0123456789abcdef"
	adminToken = "admin-token-0123456789abcdef"
)

func setOverride(ctx context.Context, conn *grpc.ClientConn) error {
	_, err := allotv1.NewAdminClient(conn).SetOverride(ctx, &allotv1.SetOverrideRequest{Rule: "api-per-key", Key: "tenant-42", Limit: 5000})
	return err
}

// syncLog is a log a test reads while the allocator writes it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With tokens on, the Admin service takes its own token and nothing else:
// no token, the fleet's token or a wrong one are refused, and the admin
// token leases nothing. The change is logged with the token's name.
func TestAdminNeedsItsOwnToken(t *testing.T) {
	p := newPKI(t)
	tokens := writeFile(t, filepath.Join(p.dir, "tokens"), fleetToken+"\n")
	admins := writeFile(t, filepath.Join(p.dir, "admin-tokens"), "# name, then token\nsupport "+adminToken+"\n")
	var log syncLog
	a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile},
		TokenFile: tokens, AdminTokenFile: admins, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	ctx := ctx(t)

	for name, conn := range map[string]*grpc.ClientConn{
		"no token":        p.dialTLS(t, a.Addr(), nil),
		"the fleet token": p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer(fleetToken))),
		"a wrong token":   p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer("wrong-token-0123456789abcdef"))),
	} {
		if err := setOverride(ctx, conn); code(err) != codes.Unauthenticated {
			t.Errorf("SetOverride with %s: %v, want Unauthenticated", name, err)
		}
	}
	admin := p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer(adminToken)))
	if err := acquire(ctx, admin, "n1"); code(err) != codes.Unauthenticated {
		t.Errorf("Acquire with the admin token: %v, want Unauthenticated: an admin token is no fleet token", err)
	}
	if err := setOverride(ctx, admin); err != nil {
		t.Fatalf("SetOverride with the admin token: %v", err)
	}
	if r, _ := a.Rules().Get("api-per-key"); r.ForKey("tenant-42").Limit != 5000 {
		t.Errorf("the override is not served: limit %d", r.ForKey("tenant-42").Limit)
	}
	if got := log.String(); !strings.Contains(got, "admin: override set") || !strings.Contains(got, "by=token:support") {
		t.Errorf("the change is not logged with its caller:\n%s", got)
	}
}

// With mTLS, a certificate named in AdminIdentities is admitted; a node's
// certificate, which the fleet admits, is not.
func TestAdminIdentitiesWithMTLS(t *testing.T) {
	p := newPKI(t)
	a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile},
		AdminIdentities: []string{"ops.admin.example"}})
	ctx := ctx(t)
	node := p.dialTLS(t, a.Addr(), p.ca.Issue(t, certstest.Names{CN: "web-1", DNS: []string{"web-1"}}))
	if err := acquire(ctx, node, "web-1"); err != nil {
		t.Fatalf("the node leases: %v", err)
	}
	if err := setOverride(ctx, node); code(err) != codes.PermissionDenied {
		t.Errorf("SetOverride with a node's certificate: %v, want PermissionDenied", err)
	}
	ops := p.dialTLS(t, a.Addr(), p.ca.Issue(t, certstest.Names{CN: "someone", DNS: []string{"ops.admin.example"}}))
	if err := setOverride(ctx, ops); err != nil {
		t.Fatalf("SetOverride with the admin's certificate: %v", err)
	}
	got, err := allotv1.NewAdminClient(ops).GetOverride(ctx, &allotv1.GetOverrideRequest{Rule: "api-per-key", Key: "tenant-42"})
	if err != nil || got.Override.SetBy != "cert:ops.admin.example" {
		t.Fatalf("GetOverride: %v %v, want it set by cert:ops.admin.example", got, err)
	}
}

// Without an admin credential configured the service is off, and says how
// to turn it on; the settings that cannot work stop the start.
func TestAdminOffAndConfigErrors(t *testing.T) {
	a := serve(t, allocator.Config{})
	conn, err := grpc.NewClient(a.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = setOverride(ctx(t), conn)
	if code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Errorf("SetOverride with the Admin service off: %v, want PermissionDenied naming --admin-token-file", err)
	}
	p := newPKI(t)
	admins := writeFile(t, filepath.Join(p.dir, "admin-tokens"), adminToken+"\n")
	for _, c := range []struct {
		cfg  allocator.Config
		want string
	}{
		{allocator.Config{AdminTokenFile: admins}, "--admin-token-file needs --tls-cert"},
		{allocator.Config{AdminIdentities: []string{"ops"}, TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}}, "--admin-identities needs --tls-client-ca"},
		{allocator.Config{AdminTokenFile: writeFile(t, filepath.Join(p.dir, "short"), "short\n"), TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}}, "at least 16"},
	} {
		if _, err := allocator.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error saying %q", err, c.want)
		}
	}
}
