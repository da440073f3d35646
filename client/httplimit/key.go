package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"
)

// maxKey is the SDK's limit on a key's length (client.ErrInvalidKey).
const maxKey = 512

// key is the Allot key of r: its API key, else its caller's identity,
// else its client IP. Each kind has its own prefix, so that an API key
// spelled like an IP address cannot spend that address's quota.
func (m *Middleware) key(r *http.Request) string {
	if m.keyHdr != "" {
		if v := r.Header.Get(m.keyHdr); v != "" {
			return bounded("key:", v)
		}
	}
	if m.opts.Identity != nil {
		if id, ok := m.opts.Identity(r); ok && id != "" {
			return bounded("id:", id)
		}
	}
	return bounded("ip:", m.clientIP(r))
}

// bounded joins prefix and v, hashing v when the key would not be one the
// SDK accepts (client.ErrInvalidKey): longer than 512 bytes, or not UTF-8
// (a header or metadata value may hold any bytes). Such a key must still be
// limited, like any other, not fail.
func bounded(prefix, v string) string {
	if len(prefix)+len(v) <= maxKey && utf8.ValidString(v) {
		return prefix + v
	}
	sum := sha256.Sum256([]byte(v))
	return prefix + "sha256:" + hex.EncodeToString(sum[:])
}

func (m *Middleware) clientIP(r *http.Request) string {
	if m.opts.TrustProxy {
		if ip, ok := lastForwarded(r.Header.Values("X-Forwarded-For")); ok {
			return ip
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	if host == "" {
		return "unknown"
	}
	return host
}

// lastForwarded is the last address in X-Forwarded-For, the one the
// nearest proxy wrote. An entry that is not an address (a proxy that
// writes "unknown", or garbage) yields nothing.
func lastForwarded(values []string) (string, bool) {
	for i := len(values) - 1; i >= 0; i-- {
		entries := strings.Split(values[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			v := strings.TrimSpace(entries[j])
			if v == "" {
				continue
			}
			if a, err := netip.ParseAddr(v); err == nil {
				return a.Unmap().WithZone("").String(), true
			}
			if ap, err := netip.ParseAddrPort(v); err == nil {
				return ap.Addr().Unmap().WithZone("").String(), true
			}
			return "", false
		}
	}
	return "", false
}
