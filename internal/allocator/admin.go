package allocator

// The Admin service's wiring: its credential, apart from the fleet's (an
// admin token, or a client certificate named in AdminIdentities), the
// store its overrides live in, and the poll that brings other allocators'
// changes.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// adminPrefix starts the full names of the Admin service's methods.
const adminPrefix = "/allot.v1.Admin/"

// adminGuard admits Admin calls: a token of its own file, or a verified
// client certificate that names one of its identities. Fleet credentials
// do not count: a node may lease, not change limits.
type adminGuard struct {
	tokenFile  string
	tokens     atomic.Pointer[[]adminToken]
	identities []string
}

// adminToken is a token's digest and the name the audit log gives it.
type adminToken struct {
	sum  [sha256.Size]byte
	name string
}

func (g *adminGuard) on() bool { return g.tokenFile != "" || len(g.identities) > 0 }

// readAdminTokens reads an admin token file: one token a line, optionally
// after a name and a space ("alice <token>"), which the audit log uses;
// without one the log names the token by a digest prefix. Blank lines and
// lines starting with # are skipped.
func readAdminTokens(file string) ([]adminToken, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file: %w", err)
	}
	var out []adminToken
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, named := strings.Cut(line, " ")
		if !named {
			tok = name
		}
		tok = strings.TrimSpace(tok)
		if len(tok) < minTokenLen {
			return nil, fmt.Errorf("--admin-token-file %s:%d: token of %d bytes, want at least %d", file, i+1, len(tok), minTokenLen)
		}
		sum := sha256.Sum256([]byte(tok))
		if !named {
			name = hex.EncodeToString(sum[:4])
		}
		out = append(out, adminToken{sum: sum, name: name})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--admin-token-file %s: no token in it", file)
	}
	return out, nil
}

func (g *adminGuard) loadTokens() error {
	if g.tokenFile == "" {
		return nil
	}
	toks, err := readAdminTokens(g.tokenFile)
	if err != nil {
		return err
	}
	g.tokens.Store(&toks)
	return nil
}

// admit returns ctx with the caller's admin identity, or the refusal.
func (g *adminGuard) admit(ctx context.Context) (context.Context, error) {
	if !g.on() {
		return nil, status.Error(codes.PermissionDenied,
			"the Admin service is off on this allocator: start it with --admin-token-file or --admin-identities (docs/security.md)")
	}
	var names []string
	if leaf, err := verifiedLeaf(ctx); err == nil {
		names = certNames(leaf)
		for _, n := range names {
			if slices.Contains(g.identities, n) {
				return server.WithCaller(ctx, "cert:"+n), nil
			}
		}
	}
	if tok := bearerToken(ctx); tok != "" {
		if name, ok := g.matchToken(tok); ok {
			return server.WithCaller(ctx, "token:"+name), nil
		}
		return nil, status.Error(codes.Unauthenticated, "token not accepted for the Admin service: it takes a token of --admin-token-file, not the fleet's")
	}
	if len(names) > 0 && len(g.identities) > 0 {
		return nil, status.Errorf(codes.PermissionDenied, "the client certificate names %q, none of them in --admin-identities", names)
	}
	return nil, status.Error(codes.Unauthenticated,
		"the Admin service needs an admin credential: \"authorization: Bearer <token>\" with a token of --admin-token-file, or a client certificate named in --admin-identities")
}

// matchToken compares tok with every admin token, in constant time.
func (g *adminGuard) matchToken(tok string) (string, bool) {
	toks := g.tokens.Load()
	if toks == nil {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	name, ok := "", false
	for _, t := range *toks {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			name, ok = t.name, true
		}
	}
	return name, ok
}

func bearerToken(ctx context.Context) string {
	for _, v := range metadata.ValueFromIncomingContext(ctx, "authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return t
		}
	}
	return ""
}

// checkAdmin validates the admin settings, naming the flags.
func (c *Config) checkAdmin() error {
	switch {
	case c.AdminTokenFile != "" && c.TLS.CertFile == "":
		return errors.New("--admin-token-file needs --tls-cert: a token must not cross the network in plaintext")
	case len(c.AdminIdentities) > 0 && c.TLS.ClientCAFile == "":
		return errors.New("--admin-identities needs --tls-client-ca: identities are the names of verified client certificates")
	case c.OverridesPoll < 0:
		return fmt.Errorf("--overrides-poll: must be positive, got %v", c.OverridesPoll)
	}
	return nil
}

// setupAdmin builds the admin guard; the error names the flag.
func (a *Allocator) setupAdmin() error {
	if err := a.cfg.checkAdmin(); err != nil {
		return err
	}
	a.admin = &adminGuard{tokenFile: a.cfg.AdminTokenFile, identities: a.cfg.AdminIdentities}
	a.guard.admin = a.admin
	return a.admin.loadTokens()
}

// startOverrides serves the store's runtime overrides over the file's
// rules, read once now: an allocator restarted serves them from its first
// call (or, with the store down, once it is back).
func (a *Allocator) startOverrides() {
	ovs, shared := store.OverridesOf(a.store)
	a.overlay = server.NewOverlay(a.server, ovs, a.server.Rules())
	if !shared && a.admin.on() {
		a.log.Warn("admin: overrides set through the Admin service live in this process only: lost on restart, not seen by other allocators; use --redis to keep them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StoreTimeout)
	defer cancel()
	if err := a.overlay.Sync(ctx); err != nil {
		a.log.Warn("admin: runtime overrides not read at start; serving the file's rules until the store answers", "err", err)
	}
}
