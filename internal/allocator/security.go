package allocator

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/internal/certs"
	"github.com/allot-dev/allot/internal/fallback"
)

// TLSConfig serves the allocator over TLS. Files are PEM.
type TLSConfig struct {
	// CertFile and KeyFile are the allocator's certificate chain and key.
	// default: none, plaintext
	CertFile, KeyFile string
	// ClientCAFile, when set, turns on mTLS: every caller must present a
	// certificate signed by one of these CAs, or the handshake fails.
	ClientCAFile string
	// NodeIdentity says how a node's certificate names it, with mTLS:
	// "{node}" stands for the node_id, and Acquire and Release are refused
	// (PermissionDenied) unless a DNS or URI SAN, or the CN, of the
	// caller's certificate is the pattern with the node_id in place, e.g.
	// "{node}", "{node}.nodes.example.com", "spiffe://example.com/node/{node}".
	// "*" accepts any node_id from any fleet certificate.
	NodeIdentity string
	// Reload is how often the files are read for changes (renewed
	// certificates are picked up at the next handshake). Negative: only on
	// ReloadCredentials (SIGHUP).
	Reload time.Duration
}

// Metrics endpoint TLS modes (Config.MetricsTLS).
const (
	MetricsPlain = ""
	MetricsTLS   = "tls"  // the gRPC certificate, no client certificate asked
	MetricsMTLS  = "mtls" // and a client certificate from TLS.ClientCAFile
)

// checkSecurity validates the TLS, token and access settings, naming the
// flags.
func (c *Config) checkSecurity() error {
	t := c.TLS
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case t.ClientCAFile != "" && t.CertFile == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	case c.TokenFile != "" && t.CertFile == "":
		return errors.New("--auth-token-file needs --tls-cert: a token must not cross the network in plaintext")
	}
	if err := checkIdentityPattern(t.NodeIdentity); err != nil {
		return err
	}
	switch c.MetricsTLS {
	case MetricsPlain:
	case MetricsTLS, MetricsMTLS:
		if t.CertFile == "" {
			return fmt.Errorf("--metrics-tls=%s needs --tls-cert", c.MetricsTLS)
		}
		if c.MetricsTLS == MetricsMTLS && t.ClientCAFile == "" {
			return errors.New("--metrics-tls=mtls needs --tls-client-ca")
		}
	default:
		return fmt.Errorf("--metrics-tls: want tls or mtls (or empty), got %q", c.MetricsTLS)
	}
	for flag, a := range map[string]Access{"--reflection": c.Reflection, "--get-rules": c.GetRules} {
		if a == "" {
			continue
		}
		if _, err := ParseAccess(string(a)); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	return nil
}

// setupSecurity loads the certificates, the token file and the gossip
// keyring, and builds the guard.
func (a *Allocator) setupSecurity() error {
	if err := a.cfg.checkSecurity(); err != nil {
		return err
	}
	t := a.cfg.TLS
	identity := ""
	if t.ClientCAFile != "" {
		identity = t.NodeIdentity
	}
	a.guard = &guard{tokenFile: a.cfg.TokenFile, identity: identity,
		reflection: a.cfg.Reflection, getRules: a.cfg.GetRules}
	if err := a.guard.loadTokens(); err != nil {
		return err
	}
	if a.cfg.GossipKeyringFile != "" {
		keys, err := fallback.ReadKeyring(a.cfg.GossipKeyringFile)
		if err != nil {
			return fmt.Errorf("--gossip-keyring: %w", err)
		}
		a.gossipKeys = keys
	}
	if t.CertFile == "" {
		return nil
	}
	w, err := certs.Load(certs.Files{Cert: t.CertFile, Key: t.KeyFile, CA: t.ClientCAFile}, a.log)
	if err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	a.certs = w
	return nil
}

// serverCreds are the gRPC server's transport credentials, if any.
func (a *Allocator) serverCreds() []grpc.ServerOption {
	if a.certs == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(a.certs.ServerConfig(a.cfg.TLS.ClientCAFile != "")))}
}

// metricsListener wraps the metrics listener in TLS when asked to.
func (a *Allocator) metricsListener(lis net.Listener) net.Listener {
	if a.cfg.MetricsTLS == MetricsPlain {
		return lis
	}
	return tls.NewListener(lis, a.certs.ServerConfig(a.cfg.MetricsTLS == MetricsMTLS))
}

// pollCerts starts reading the certificate files for changes.
func (a *Allocator) pollCerts() {
	if a.certs == nil || a.cfg.TLS.Reload < 0 {
		return
	}
	a.certs.Poll(a.clock, a.cfg.TLS.Reload)
}

// ReloadCredentials reads the certificate files, the token files (the
// parent's too) and the gossip keyring again (cmd/allocator does on SIGHUP). What fails to load
// keeps its previous value; the error says what.
func (a *Allocator) ReloadCredentials() error {
	var errs []error
	if a.certs != nil {
		if changed, err := a.certs.Reload(); err != nil {
			errs = append(errs, err)
		} else if changed {
			a.log.Info("tls: certificates reloaded")
		}
	}
	if a.guard.tokenFile != "" {
		if err := a.guard.loadTokens(); err != nil {
			errs = append(errs, err)
		} else {
			a.log.Info("auth tokens reloaded")
		}
	}
	if a.admin.tokenFile != "" {
		if err := a.admin.loadTokens(); err != nil {
			errs = append(errs, err)
		} else {
			a.log.Info("admin tokens reloaded")
		}
	}
	errs = append(errs, a.reloadParent()...)
	if a.cfg.GossipKeyringFile != "" && a.gossip != nil {
		keys, err := fallback.ReadKeyring(a.cfg.GossipKeyringFile)
		if err == nil {
			err = a.gossip.SetKeys(keys)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--gossip-keyring: %w", err))
		} else {
			a.log.Info("gossip keyring reloaded", "keys", len(keys))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		a.log.Error("credentials reload failed; keeping what did not load", "err", err)
	}
	return err
}
