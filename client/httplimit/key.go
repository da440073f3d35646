package httplimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/allot-dev/allot/client/internal/middleware"
)

// key is the Allot key of r: its API key, else its caller's identity,
// else its client IP. Each kind has its own prefix, so that an API key
// spelled like an IP address cannot spend that address's quota.
func (m *Middleware) key(r *http.Request) string {
	if m.keyHdr != "" {
		if v := r.Header.Get(m.keyHdr); v != "" {
			return middleware.BoundedKey("key:", v)
		}
	}
	if m.opts.Identity != nil {
		if id, ok := m.opts.Identity(r); ok && id != "" {
			return middleware.BoundedKey("id:", id)
		}
	}
	return middleware.BoundedKey("ip:", m.clientIP(r))
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
