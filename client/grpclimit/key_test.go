package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

type fakeAddr struct{ network, s string }

func (a fakeAddr) Network() string { return a.network }
func (a fakeAddr) String() string  { return a.s }

func TestKey(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5000}
	cases := []struct {
		name string
		md   []string
		user string
		addr net.Addr
		want string
	}{
		{name: "api key first", md: []string{"x-api-key", "k1"}, user: "alice", addr: tcp, want: "key:k1"},
		{name: "empty key skipped", md: []string{"x-api-key", "", "x-api-key", "k2"}, addr: tcp, want: "key:k2"},
		{name: "identity next", md: []string{"other", "x"}, user: "alice", addr: tcp, want: "id:alice"},
		{name: "peer ip last", addr: tcp, want: "ip:192.0.2.1"},
		{name: "peer ipv6", addr: &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1}, want: "ip:2001:db8::1"},
		{name: "unix peer", addr: fakeAddr{"unix", "/run/app.sock"}, want: "peer:/run/app.sock"},
		{name: "no peer", want: "peer:unknown"},
		{name: "long key", md: []string{"x-api-key", strings.Repeat("k", 600)}, addr: tcp,
			want: "key:sha256:" + sha256hex(strings.Repeat("k", 600))},
		{name: "key not UTF-8", md: []string{"x-api-key", "bad\xff\xfekey"}, addr: tcp,
			want: "key:sha256:" + sha256hex("bad\xff\xfekey")},
		{name: "identity not UTF-8", user: "al\xffice", addr: tcp, want: "id:sha256:" + sha256hex("al\xffice")},
		{name: "unix peer not UTF-8", addr: fakeAddr{"unix", "/run/\xff.sock"}, want: "peer:sha256:" + sha256hex("/run/\xff.sock")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			i := &Interceptor{opts: Options{KeyMetadata: "X-Api-Key",
				Identity: func(context.Context) (string, bool) { return tc.user, tc.user != "" }}}
			ctx := context.Background()
			if tc.md != nil {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(tc.md...))
			}
			if tc.addr != nil {
				ctx = peer.NewContext(ctx, &peer.Peer{Addr: tc.addr})
			}
			if got := i.key(ctx); got != tc.want {
				t.Fatalf("key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	got := redact("key:sk-live-secret")
	if !strings.HasPrefix(got, "key:") || len(got) != len("key:")+16 || strings.Contains(got, "secret") {
		t.Fatalf("redact = %q", got)
	}
	if redact("key:a") == redact("key:b") {
		t.Fatal("two keys redact alike")
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
