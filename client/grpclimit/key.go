package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/allot-dev/allot/client/internal/middleware"
)

// key is the Allot key of a call: its API key, else its caller's
// identity, else its peer's address. Each kind has its own prefix, so that
// an API key spelled like an address cannot spend that address's quota.
func (i *Interceptor) key(ctx context.Context) string {
	if i.opts.KeyMetadata != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get(i.opts.KeyMetadata) {
			if v != "" {
				return middleware.BoundedKey("key:", v)
			}
		}
	}
	if i.opts.Identity != nil {
		if id, ok := i.opts.Identity(ctx); ok && id != "" {
			return middleware.BoundedKey("id:", id)
		}
	}
	return peerKey(ctx)
}

// peerKey is the peer's IP, without the port: every connection from one
// host shares a quota. Peers without an IP (unix sockets, in-memory
// listeners) are keyed by their address's text.
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "peer:unknown"
	}
	s := p.Addr.String()
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return "ip:" + a.Unmap().WithZone("").String()
	}
	if s == "" {
		s = p.Addr.Network()
	}
	return middleware.BoundedKey("peer:", s)
}

// redact names a key without showing it: its kind and the first 16 hex
// digits of the SHA-256 of the whole key, enough for someone who knows the
// key to recognise it. It keeps API keys out of error messages and the
// logs of proxies; it is no secret for a guessable key such as an IP.
func redact(key string) string {
	kind, _, _ := strings.Cut(key, ":")
	sum := sha256.Sum256([]byte(key))
	return kind + ":" + hex.EncodeToString(sum[:8])
}
