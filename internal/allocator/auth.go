package allocator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// Access says who may call a service that leasing does not need.
type Access string

const (
	// AccessAuthenticated admits the callers that pass the allocator's
	// authentication: a client certificate (mTLS) or the token. Without
	// either configured, every caller passes.
	AccessAuthenticated Access = "authenticated"
	// AccessOn admits every caller that can connect.
	AccessOn Access = "on"
	// AccessOff turns the service off.
	AccessOff Access = "off"
)

// ParseAccess reads "authenticated", "on" or "off".
func ParseAccess(s string) (Access, error) {
	switch a := Access(s); a {
	case AccessAuthenticated, AccessOn, AccessOff:
		return a, nil
	}
	return "", fmt.Errorf("want authenticated, on or off, got %q", s)
}

// minTokenLen keeps guessable tokens out.
const minTokenLen = 16

// guard admits calls: the token, who may use reflection and GetRules, and
// with mTLS, that a node_id is the one its certificate names.
type guard struct {
	tokenFile  string
	tokens     atomic.Pointer[[][sha256.Size]byte] // nil: no token needed
	identity   string                              // "" or "*": any node_id
	reflection Access
	getRules   Access
	admin      *adminGuard
}

// readTokens reads a token file: one token a line, blank lines and lines
// starting with # skipped. Several tokens let a fleet move to a new one
// without a flag day.
func readTokens(file string) ([][sha256.Size]byte, error) {
	toks, err := tokenLines("--auth-token-file", file)
	if err != nil {
		return nil, err
	}
	sums := make([][sha256.Size]byte, len(toks))
	for i, t := range toks {
		sums[i] = sha256.Sum256([]byte(t))
	}
	return sums, nil
}

// tokenLines reads the tokens of a token file given by flag, in
// readTokens's format; at least one, or an error naming the flag and the
// file.
func tokenLines(flag, file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	var toks []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < minTokenLen {
			return nil, fmt.Errorf("%s %s:%d: token of %d bytes, want at least %d", flag, file, i+1, len(line), minTokenLen)
		}
		toks = append(toks, line)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s %s: no token in it", flag, file)
	}
	return toks, nil
}

func (g *guard) loadTokens() error {
	if g.tokenFile == "" {
		return nil
	}
	sums, err := readTokens(g.tokenFile)
	if err != nil {
		return err
	}
	g.tokens.Store(&sums)
	return nil
}

// access is what a method needs: health is open (probes carry no token),
// reflection and GetRules are configured, the rest needs authentication.
func (g *guard) access(method string) Access {
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1.Health/"):
		return AccessOn
	case strings.HasPrefix(method, "/grpc.reflection."):
		return g.reflection
	case method == allotv1.Allocator_GetRules_FullMethodName:
		return g.getRules
	}
	return AccessAuthenticated
}

func (g *guard) admit(ctx context.Context, method string) error {
	switch g.access(method) {
	case AccessOn:
		return nil
	case AccessOff:
		return status.Errorf(codes.PermissionDenied, "%s is turned off on this allocator", method)
	}
	return g.authenticate(ctx)
}

// authenticate checks the token. A client certificate needs no check here:
// with mTLS, the handshake has already refused a caller without one.
func (g *guard) authenticate(ctx context.Context) error {
	sums := g.tokens.Load()
	if sums == nil {
		return nil
	}
	var got string
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			got = t
			break
		}
	}
	if got == "" {
		return status.Error(codes.Unauthenticated, "no token: send \"authorization: Bearer <token>\"")
	}
	sum := sha256.Sum256([]byte(got))
	match := 0
	for i := range *sums { // every token compared, in constant time
		match |= subtle.ConstantTimeCompare(sum[:], (*sums)[i][:])
	}
	if match != 1 {
		return status.Error(codes.Unauthenticated, "token not accepted")
	}
	return nil
}

// checkNode refuses a node_id that the caller's certificate does not name.
func (g *guard) checkNode(ctx context.Context, nodeID string) error {
	if g.identity == "" || g.identity == "*" || nodeID == "" {
		return nil // an empty node_id is the server's InvalidArgument
	}
	leaf, err := verifiedLeaf(ctx)
	if err != nil {
		return err
	}
	want := strings.ReplaceAll(g.identity, "{node}", nodeID)
	names := certNames(leaf)
	for _, n := range names {
		if n == want {
			return nil
		}
	}
	if len(names) > 4 {
		names = append(names[:4], "…")
	}
	return status.Errorf(codes.PermissionDenied,
		"node_id %q does not match the client certificate: it must name %q, it names %q", nodeID, want, names)
}

// certNames are the names a certificate may identify a node by: its DNS
// and URI SANs, then its CN.
func certNames(c *x509.Certificate) []string {
	names := append([]string(nil), c.DNSNames...)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	if c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return names
}

func verifiedLeaf(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer information")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, status.Error(codes.Unauthenticated, "no verified client certificate")
	}
	return info.State.VerifiedChains[0][0], nil
}

type nodeRequest interface{ GetNodeId() string }

func (g *guard) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, adminPrefix) { // its own credential, not the fleet's (admin.go)
			ctx, err := g.admin.admit(ctx)
			if err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}
		if err := g.admit(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		if r, ok := req.(nodeRequest); ok {
			if err := g.checkNode(ctx, r.GetNodeId()); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

func (g *guard) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := g.admit(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// checkIdentityPattern validates --tls-node-id.
func checkIdentityPattern(p string) error {
	if p == "" || p == "*" {
		return nil
	}
	if strings.Count(p, "{node}") != 1 {
		return errors.New("--tls-node-id: want a pattern with {node} once (e.g. \"{node}\" or \"spiffe://fleet/node/{node}\"), or \"*\"")
	}
	return nil
}
