package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	long := strings.Repeat("x", 509) // "key:" + 509 = 513 bytes, one too many
	cases := []struct {
		name       string
		trustProxy bool
		remote     string
		headers    map[string][]string
		user       string
		want       string
	}{
		{name: "api key first", remote: "192.0.2.1:5000", user: "alice",
			headers: map[string][]string{"X-Api-Key": {"k1"}}, want: "key:k1"},
		{name: "identity next", remote: "192.0.2.1:5000", user: "alice", want: "id:alice"},
		{name: "empty api key is none", remote: "192.0.2.1:5000", user: "alice",
			headers: map[string][]string{"X-Api-Key": {""}}, want: "id:alice"},
		{name: "ip last", remote: "192.0.2.1:5000", want: "ip:192.0.2.1"},
		{name: "ipv6", remote: "[2001:db8::1%eth0]:443", want: "ip:2001:db8::1"},
		{name: "ipv4-mapped", remote: "[::ffff:192.0.2.1]:443", want: "ip:192.0.2.1"},
		{name: "no port", remote: "192.0.2.1", want: "ip:192.0.2.1"},
		{name: "no address", remote: "", want: "ip:unknown"},
		{name: "xff ignored", remote: "192.0.2.1:5000",
			headers: map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, want: "ip:192.0.2.1"},
		{name: "xff last entry", trustProxy: true, remote: "10.0.0.2:5000",
			headers: map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7"}}, want: "ip:203.0.113.7"},
		{name: "xff last line", trustProxy: true, remote: "10.0.0.2:5000",
			headers: map[string][]string{"X-Forwarded-For": {"198.51.100.1", "203.0.113.7 ,"}}, want: "ip:203.0.113.7"},
		{name: "xff with port", trustProxy: true, remote: "10.0.0.2:5000",
			headers: map[string][]string{"X-Forwarded-For": {"[2001:db8::7]:1234"}}, want: "ip:2001:db8::7"},
		{name: "xff garbage", trustProxy: true, remote: "10.0.0.2:5000",
			headers: map[string][]string{"X-Forwarded-For": {"203.0.113.7, unknown"}}, want: "ip:10.0.0.2"},
		{name: "xff missing", trustProxy: true, remote: "10.0.0.2:5000", want: "ip:10.0.0.2"},
		{name: "longest kept", headers: map[string][]string{"X-Api-Key": {long[:508]}}, want: "key:" + long[:508]},
		{name: "longer hashed", headers: map[string][]string{"X-Api-Key": {long}},
			want: "key:sha256:" + sha256hex(long)},
		{name: "not UTF-8 hashed", headers: map[string][]string{"X-Api-Key": {"bad\xff\xfekey"}},
			want: "key:sha256:" + sha256hex("bad\xff\xfekey")},
		{name: "identity not UTF-8 hashed", remote: "192.0.2.1:5000", user: "al\xffice",
			want: "id:sha256:" + sha256hex("al\xffice")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &Middleware{keyHdr: "X-Api-Key", opts: Options{TrustProxy: tc.trustProxy,
				Identity: func(*http.Request) (string, bool) { return tc.user, tc.user != "" }}}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for name, vs := range tc.headers {
				r.Header[name] = vs
			}
			if got := m.key(r); got != tc.want {
				t.Fatalf("key %q, want %q", got, tc.want)
			}
		})
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
