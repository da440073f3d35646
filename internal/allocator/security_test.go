package allocator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/fallback"
)

// pki is a fleet CA with the allocator's certificate in files, and a rogue
// CA that the allocator does not trust.
type pki struct {
	dir               string
	ca, rogue         *certstest.CA
	caFile            string
	certFile, keyFile string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: certstest.NewCA(t, "fleet-ca"), rogue: certstest.NewCA(t, "rogue-ca")}
	p.caFile = p.ca.Write(t, p.dir, "ca.crt")
	p.certFile, p.keyFile = p.ca.Issue(t, certstest.Loopback).Write(t, p.dir, "allocator")
	return p
}

// dialTLS connects to addr over TLS trusting the fleet CA, presenting
// client (if any) and adding opts.
func (p *pki) dialTLS(t *testing.T, addr string, client *certstest.Leaf, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.ca.Pool()}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.TLS(t)}
	}
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serve runs an allocator; unlike start it makes no plaintext client.
func serve(t *testing.T, cfg allocator.Config) *allocator.Allocator {
	t.Helper()
	a, err := allocator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	t.Cleanup(func() {
		a.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return a
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

func acquire(ctx context.Context, conn *grpc.ClientConn, node string) error {
	_, err := allotv1.NewAllocatorClient(conn).Acquire(ctx, &allotv1.AcquireRequest{NodeId: node,
		Requests: []*allotv1.LeaseRequest{{Rule: "api-per-key", Key: "k", Want: 1}}})
	return err
}

func listServices(ctx context.Context, conn *grpc.ClientConn) error {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	// A stream the server has already ended gives io.EOF on Send; its
	// status comes with Recv.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = stream.Recv()
	return err
}

func code(err error) codes.Code { return status.Code(err) }

// TLS without client certificates, and shared tokens: every call but a
// health check needs one of the tokens; a rotated file takes effect on
// ReloadCredentials.
func TestTokenAuth(t *testing.T) {
	p := newPKI(t)
	oldTok, newTok := "old-token-0123456789abcdef", "new-token-0123456789abcdef"
	tokens := writeFile(t, filepath.Join(p.dir, "tokens"), "# two while the fleet moves\n"+oldTok+"\n"+newTok+"\n")
	a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, TokenFile: tokens})
	ctx := ctx(t)

	none := p.dialTLS(t, a.Addr(), nil)
	if err := acquire(ctx, none, "n1"); code(err) != codes.Unauthenticated {
		t.Fatalf("Acquire without a token: %v, want Unauthenticated", err)
	}
	if _, err := allotv1.NewAllocatorClient(none).Check(ctx, &allotv1.CheckRequest{Rule: "login-attempts", Key: "k"}); code(err) != codes.Unauthenticated {
		t.Fatalf("Check without a token: %v", err)
	}
	h, err := healthpb.NewHealthClient(none).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health needs no token: %v %v", h, err)
	}
	wrong := p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer("wrong-token-0123456789abcdef")))
	if err := acquire(ctx, wrong, "n1"); code(err) != codes.Unauthenticated {
		t.Fatalf("Acquire with a wrong token: %v, want Unauthenticated", err)
	}
	withOld := p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer(oldTok)))
	withNew := p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer(newTok)))
	for _, conn := range []*grpc.ClientConn{withOld, withNew} {
		if err := acquire(ctx, conn, "n1"); err != nil {
			t.Fatalf("Acquire with a listed token: %v", err)
		}
	}

	writeFile(t, tokens, newTok+"\n")
	if err := a.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	if err := acquire(ctx, withOld, "n1"); code(err) != codes.Unauthenticated {
		t.Fatalf("the retired token after a reload: %v, want Unauthenticated", err)
	}
	if err := acquire(ctx, withNew, "n1"); err != nil {
		t.Fatalf("the new token after a reload: %v", err)
	}
	writeFile(t, tokens, "short\n")
	if err := a.ReloadCredentials(); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a token file with a 5-byte token: %v", err)
	}
	if err := acquire(ctx, withNew, "n1"); err != nil {
		t.Fatalf("a bad token file replaced the good one: %v", err)
	}
}

// Reflection and GetRules are on, off, or for authenticated callers only.
func TestReflectionAndGetRulesAccess(t *testing.T) {
	p := newPKI(t)
	tok := "token-0123456789abcdef"
	tokens := writeFile(t, filepath.Join(p.dir, "tokens"), tok+"\n")
	cases := []struct {
		access          allocator.Access
		anonymous, with codes.Code // reflection; GetRules differs only when off
	}{
		{allocator.AccessOn, codes.OK, codes.OK},
		{allocator.AccessAuthenticated, codes.Unauthenticated, codes.OK},
		{allocator.AccessOff, codes.Unimplemented, codes.Unimplemented},
	}
	for _, c := range cases {
		t.Run(string(c.access), func(t *testing.T) {
			a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile},
				TokenFile: tokens, Reflection: c.access, GetRules: c.access})
			ctx := ctx(t)
			anon, authed := p.dialTLS(t, a.Addr(), nil), p.dialTLS(t, a.Addr(), nil, grpc.WithPerRPCCredentials(bearer(tok)))
			if err := listServices(ctx, anon); code(err) != c.anonymous {
				t.Errorf("reflection, no token: %v, want %v", err, c.anonymous)
			}
			if err := listServices(ctx, authed); code(err) != c.with {
				t.Errorf("reflection, token: %v, want %v", err, c.with)
			}
			wantRules := func(want codes.Code) codes.Code {
				if want == codes.Unimplemented {
					return codes.PermissionDenied // the service is there, the method turned off
				}
				return want
			}
			for conn, want := range map[*grpc.ClientConn]codes.Code{anon: wantRules(c.anonymous), authed: wantRules(c.with)} {
				if _, err := allotv1.NewAllocatorClient(conn).GetRules(ctx, &allotv1.GetRulesRequest{}); code(err) != want {
					t.Errorf("GetRules: %v, want %v", err, want)
				}
			}
		})
	}
	// Without any authentication configured, "authenticated" is everyone.
	_, conn := start(t, allocator.Config{})
	if err := listServices(ctx(t), conn); err != nil {
		t.Fatalf("reflection with no authentication configured: %v", err)
	}
}

// With mTLS, a node's certificate names it: a node_id it does not name is
// refused, and so is a caller without a certificate from the fleet CA.
func TestMTLSNodeIdentity(t *testing.T) {
	p := newPKI(t)
	node1 := p.ca.Issue(t, certstest.Names{CN: "node-1"})
	dnsNode := p.ca.Issue(t, certstest.Names{CN: "web", DNS: []string{"node-7.nodes.test"}})
	spiffe := p.ca.Issue(t, certstest.Names{URIs: []string{"spiffe://fleet.test/node/node-9"}})
	rogue := p.rogue.Issue(t, certstest.Names{CN: "node-1"})
	cases := []struct {
		pattern string
		cert    *certstest.Leaf
		node    string
		want    codes.Code
	}{
		{"", node1, "node-1", codes.OK}, // default: {node}, matched by the CN
		{"", node1, "node-2", codes.PermissionDenied},
		{"{node}.nodes.test", dnsNode, "node-7", codes.OK},
		{"{node}.nodes.test", dnsNode, "web", codes.PermissionDenied},
		{"spiffe://fleet.test/node/{node}", spiffe, "node-9", codes.OK},
		{"spiffe://fleet.test/node/{node}", node1, "node-1", codes.PermissionDenied},
		{"*", node1, "anything", codes.OK},
		{"", rogue, "node-1", codes.Unavailable}, // the handshake fails
		{"", nil, "node-1", codes.Unavailable},
	}
	for _, c := range cases {
		a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile,
			ClientCAFile: p.caFile, NodeIdentity: c.pattern}})
		err := acquire(ctx(t), p.dialTLS(t, a.Addr(), c.cert), c.node)
		if code(err) != c.want {
			t.Errorf("pattern %q, node_id %q: %v, want %v", c.pattern, c.node, err, c.want)
		}
		if c.want == codes.PermissionDenied && !strings.Contains(err.Error(), "does not match the client certificate") {
			t.Errorf("the refusal should say why: %v", err)
		}
	}
}

// Renewed certificate files are served from the next handshake after the
// poll (clock injected), or at once on ReloadCredentials; files that do not
// load keep the certificate in use.
func TestCertificatesReloadWhenFilesChange(t *testing.T) {
	p := newPKI(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	a := serve(t, allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile,
		Reload: 5 * time.Second}, Clock: clk})
	served := func() *x509.Certificate {
		t.Helper()
		conn := p.dialTLS(t, a.Addr(), nil)
		defer conn.Close()
		var pr peer.Peer
		if _, err := healthpb.NewHealthClient(conn).Check(ctx(t), &healthpb.HealthCheckRequest{}, grpc.Peer(&pr)); err != nil {
			t.Fatal(err)
		}
		return pr.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0]
	}
	first := served()
	// The health probe's timer and the certificate poll's.
	if !clk.WaitTimers(2, 5*time.Second) {
		t.Fatal("the poll loops never armed their timers")
	}

	renewed := p.ca.Issue(t, certstest.Loopback)
	renewed.Write(t, p.dir, "allocator")
	if got := served(); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("the new files were served before the poll")
	}
	clk.Advance(5 * time.Second)
	if !clk.WaitTimers(2, 5*time.Second) { // both loops done and re-armed
		t.Fatal("the poll did not come back")
	}
	if got := served(); got.SerialNumber.Cmp(renewed.Cert.SerialNumber) != 0 {
		t.Fatalf("after the poll: serial %v, want the renewed %v", got.SerialNumber, renewed.Cert.SerialNumber)
	}

	// Half a rotation: a new certificate with the old key does not load.
	writeFile(t, p.certFile, string(p.ca.Issue(t, certstest.Loopback).CertPEM))
	if err := a.ReloadCredentials(); err == nil {
		t.Fatal("a certificate with a key that does not match loaded")
	}
	if got := served(); got.SerialNumber.Cmp(renewed.Cert.SerialNumber) != 0 {
		t.Fatal("a broken pair replaced the certificate in use")
	}
	third := p.ca.Issue(t, certstest.Loopback)
	third.Write(t, p.dir, "allocator")
	if err := a.ReloadCredentials(); err != nil { // SIGHUP, without waiting for the poll
		t.Fatal(err)
	}
	if got := served(); got.SerialNumber.Cmp(third.Cert.SerialNumber) != 0 {
		t.Fatal("ReloadCredentials did not take the new files")
	}
}

func TestSecurityConfigErrors(t *testing.T) {
	p := newPKI(t)
	cases := []struct {
		cfg  allocator.Config
		want string
	}{
		{allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile}}, "--tls-cert and --tls-key"},
		{allocator.Config{TLS: allocator.TLSConfig{ClientCAFile: p.caFile}}, "--tls-client-ca needs --tls-cert"},
		{allocator.Config{TokenFile: "/dev/null"}, "--auth-token-file needs --tls-cert"},
		{allocator.Config{MetricsTLS: "tls"}, "--metrics-tls=tls needs --tls-cert"},
		{allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, MetricsTLS: "mtls"}, "needs --tls-client-ca"},
		{allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, NodeIdentity: "node"}}, "--tls-node-id"},
		{allocator.Config{Reflection: "maybe"}, "--reflection"},
		{allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.caFile}}, "--tls-cert, --tls-key"},
		{allocator.Config{TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, TokenFile: filepath.Join(p.dir, "none")}, "--auth-token-file"},
		{allocator.Config{GossipKeyringFile: filepath.Join(p.dir, "none")}, "--gossip-keyring"},
	}
	for _, c := range cases {
		if _, err := allocator.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// The gossip keyring file is read again on ReloadCredentials (SIGHUP): a
// member with only the new key is refused before and joins after.
func TestGossipKeyringReload(t *testing.T) {
	dir := t.TempDir()
	oldKey, newKey := strings.Repeat("o", 32), strings.Repeat("n", 32)
	keyring := filepath.Join(dir, "keyring")
	writeKeys := func(keys ...string) {
		var lines []string
		for _, k := range keys {
			lines = append(lines, base64.StdEncoding.EncodeToString([]byte(k)))
		}
		writeFile(t, keyring, strings.Join(lines, "\n")+"\n")
	}
	writeKeys(oldKey)
	a := serve(t, allocator.Config{GossipBind: "127.0.0.1:0", GossipKeyringFile: keyring})
	join := func(name string) error {
		g, err := fallback.Join(fallback.GossipConfig{Name: name, Fast: true, Keys: [][]byte{[]byte(newKey)},
			Join: []string{a.GossipAddr()}})
		if err == nil {
			g.Stop()
		}
		return err
	}
	if err := join("early"); err == nil {
		t.Fatal("a member with a key the allocator does not have joined")
	}
	writeKeys(newKey, oldKey)
	if err := a.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	if err := join("late"); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	writeKeys("too short")
	if err := a.ReloadCredentials(); err == nil || !strings.Contains(err.Error(), "--gossip-keyring") {
		t.Fatalf("a bad keyring file: %v", err)
	}
}
