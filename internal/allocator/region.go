package allocator

// An allocator with a parent is a region of a tree (internal/region): the
// keys of its global rules are lent out of its leases on the parent, and
// the rest is its store's.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"

	"github.com/allot-dev/allot/internal/certs"
	"github.com/allot-dev/allot/internal/region"
	"github.com/allot-dev/allot/internal/rules"
)

// ParentTLSConfig dials the parent over TLS. Files are PEM, read again
// every TLS.Reload and by ReloadCredentials, as the allocator's own are.
type ParentTLSConfig struct {
	// CertFile and KeyFile are the region's client certificate and key;
	// with them it reaches its parent over TLS. A parent with
	// --tls-client-ca checks that the certificate names the region: its
	// --tls-node-id pattern with Region for {node}.
	CertFile, KeyFile string
	// CAFile is the CA bundle the parent's certificate is verified by
	// (read at start only). Alone, without CertFile, the region reaches
	// its parent over TLS without a client certificate (a parent that
	// authenticates by token). default: the system's roots
	CAFile string
	// ServerName is the name the parent's certificate must carry.
	// default: the host of the parent's address
	ServerName string
}

func (c *Config) checkRegion() error {
	p := c.ParentTLS
	switch {
	case c.Regions < 0:
		return fmt.Errorf("--regions %d: want 0 (what the parent says) or more", c.Regions)
	case c.Parent == "" && c.Regions != 0:
		return errors.New("--regions: is what a region cut off from its parent divides global rules by; give --parent too")
	case c.Parent == "" && c.Region != "":
		return errors.New("--region: names this allocator at its parent; give --parent too")
	case c.Parent != "" && c.Region == "":
		return errors.New("--parent: needs --region, the name this allocator holds its leases under at the parent (unique among its regions)")
	case c.Parent == "" && (p.CertFile != "" || p.KeyFile != "" || p.CAFile != "" || p.ServerName != "" || c.ParentTokenFile != ""):
		return errors.New("--parent-tls-cert, --parent-tls-key, --parent-tls-ca, --parent-tls-server-name, --parent-token-file: are how a region reaches its parent; give --parent too")
	case (p.CertFile == "") != (p.KeyFile == ""):
		return errors.New("--parent-tls-cert and --parent-tls-key go together")
	case p.ServerName != "" && p.CertFile == "" && p.CAFile == "":
		return errors.New("--parent-tls-server-name needs TLS to the parent: --parent-tls-ca, or --parent-tls-cert and --parent-tls-key")
	case c.ParentTokenFile != "" && p.CertFile == "" && p.CAFile == "":
		return errors.New("--parent-token-file needs TLS to the parent (--parent-tls-ca, or --parent-tls-cert and --parent-tls-key): a token must not cross the network in plaintext")
	}
	return nil
}

// parentToken is the bearer token a region sends its parent with every
// call; ReloadCredentials replaces it.
type parentToken struct {
	file string
	tok  atomic.Pointer[string]
}

// load reads the file's first token, in --auth-token-file's format.
func (p *parentToken) load() error {
	toks, err := tokenLines("--parent-token-file", p.file)
	if err != nil {
		return err
	}
	t := toks[0]
	for i := 0; i < len(t); i++ {
		if b := t[i]; b <= ' ' || b > '~' { // a header value carries visible ASCII only
			return fmt.Errorf("--parent-token-file %s: byte %d (%#x) of its token is not a visible ASCII character", p.file, i, b)
		}
	}
	p.tok.Store(&t)
	return nil
}

func (p *parentToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + *p.tok.Load()}, nil
}

// RequireTransportSecurity makes grpc refuse to send the token without
// TLS; checkRegion already refuses the configuration.
func (*parentToken) RequireTransportSecurity() bool { return true }

// parentCredentials loads the TLS files and the token the region dials
// its parent with; nil, nil without them (plaintext).
func (a *Allocator) parentCredentials() (*tls.Config, credentials.PerRPCCredentials, error) {
	p := a.cfg.ParentTLS
	var cfg *tls.Config
	switch {
	case p.CertFile != "":
		w, err := certs.Load(certs.Files{Cert: p.CertFile, Key: p.KeyFile, CA: p.CAFile}, a.log)
		if err != nil {
			return nil, nil, fmt.Errorf("--parent-tls-cert, --parent-tls-key, --parent-tls-ca: %w", err)
		}
		a.parentCerts, cfg = w, w.ClientConfig(p.ServerName)
	case p.CAFile != "":
		pool, err := caPool(p.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--parent-tls-ca: %w", err)
		}
		cfg = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: p.ServerName}
	default:
		return nil, nil, nil
	}
	if a.cfg.ParentTokenFile == "" {
		return cfg, nil, nil
	}
	tok := &parentToken{file: a.cfg.ParentTokenFile}
	if err := tok.load(); err != nil {
		a.stopParentCerts()
		return nil, nil, err
	}
	a.parentToken = tok
	return cfg, tok, nil
}

// caPool reads a PEM CA bundle: an error names the file when it cannot be
// read or holds no certificate.
func caPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// reloadParent reads the region's TLS files and token again.
func (a *Allocator) reloadParent() []error {
	var errs []error
	if a.parentCerts != nil {
		if changed, err := a.parentCerts.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("--parent-tls-cert, --parent-tls-key, --parent-tls-ca: %w", err))
		} else if changed {
			a.log.Info("tls: the certificate to the parent reloaded")
		}
	}
	if a.parentToken != nil {
		if err := a.parentToken.load(); err != nil {
			errs = append(errs, err)
		} else {
			a.log.Info("the token to the parent reloaded")
		}
	}
	return errs
}

// openRegion puts the region in front of the store when the allocator has
// a parent: the service lends from it (a.lending), and the store's own
// health, keys and overrides are still the store's.
func (a *Allocator) openRegion(set *rules.Set) error {
	a.lending = a.store
	if a.cfg.Parent == "" {
		a.warnGlobalWithoutParent(set)
		return nil
	}
	tlsCfg, token, err := a.parentCredentials()
	if err != nil {
		return err
	}
	rs, err := region.New(region.Config{Name: a.cfg.Region, Parent: a.cfg.Parent, Local: a.store, Clock: a.clock, Logger: a.log,
		TLS: tlsCfg, Credentials: token, Regions: a.cfg.Regions})
	if err != nil {
		a.stopParentCerts()
		return fmt.Errorf("--parent: %w", err)
	}
	a.region, a.lending = rs, rs
	a.registerRegion()
	a.log.Info("region: global rules are leased from the parent", "parent", a.cfg.Parent, "region", a.cfg.Region,
		"tls", tlsCfg != nil, "token", token != nil, "global_rules", globalRules(set))
	return nil
}

// warnGlobalWithoutParent says once that global rules are served from
// this allocator's store alone: right at the root of a tree, and a limit
// per region anywhere else.
func (a *Allocator) warnGlobalWithoutParent(set *rules.Set) {
	if a.cfg.Parent != "" {
		return
	}
	if names := globalRules(set); len(names) > 0 {
		a.warnGlobal.Do(func() {
			a.log.Warn("rules of scope global are served from this allocator's own store, as regional ones: right for the root of a tree of regions, "+
				"but each region without --parent limits them alone", "global_rules", names)
		})
	}
}

func globalRules(set *rules.Set) []string {
	var names []string
	for _, r := range set.Rules() {
		if r.IsGlobal() {
			names = append(names, r.Name)
		}
	}
	return slices.Clip(names)
}

// closeRegion gives the region's leases back to the parent.
func (a *Allocator) closeRegion() {
	if a.region == nil {
		return
	}
	if err := a.region.Close(); err != nil {
		a.log.Warn("closing the region", "err", err)
	}
	a.stopParentCerts()
}

// pollParentCerts reads the region's TLS files for changes, as pollCerts
// the allocator's own.
func (a *Allocator) pollParentCerts() {
	if a.parentCerts != nil && a.cfg.TLS.Reload >= 0 {
		a.parentCerts.Poll(a.clock, a.cfg.TLS.Reload)
	}
}

func (a *Allocator) stopParentCerts() {
	if a.parentCerts != nil {
		a.parentCerts.Stop()
	}
}

// registerRegion exports what the region holds of the parent's and whether
// the parent answers.
func (a *Allocator) registerRegion() {
	rs := a.region
	a.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_parent_up", Help: "1 while the region's calls to its parent (--parent) are answered, 0 after one failed as an outage does.",
		}, func() float64 {
			if rs.ParentDown() {
				return 0
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_global_keys", Help: "Keys of global rules the region holds leases on at its parent.",
		}, func() float64 { return float64(rs.Keys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_parent_granted_total", Help: "Tokens of global keys the parent put into the region's leases, granted or earned on rate shares: its share of the global rules.",
		}, func() float64 { return float64(rs.Meters().Granted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_asked_total", Help: "Tokens of global keys the region's nodes asked it for, in batches, a refused batch again at each retry: more than their callers' demand when short.",
		}, func() float64 { return float64(rs.Meters().Asked) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_demand", Help: "Tokens a second the region's nodes say their callers ask of global keys, summed: the demand the region asks its parent's shares by.",
		}, func() float64 { return rs.Meters().Demand }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_lent_total", Help: "Tokens of global keys the region lent its nodes, out of its leases and its fallback allowances.",
		}, func() float64 { return float64(rs.Meters().Lent) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "allot_region_parent_answer_age_seconds", Help: "Seconds since the parent last answered the region (since the region started, if it never has).",
		}, func() float64 { return rs.Meters().SinceParent.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_withheld_total", Help: "Tokens of global keys the region withheld from its nodes for the fallbacks of the nodes cut off from it.",
		}, func() float64 { return float64(rs.Withheld()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_fallback_lent_total", Help: "Tokens of global keys the region lent out of its fallback allowances (the rule over the regions) while cut off from its parent.",
		}, func() float64 { return float64(rs.FellBack()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "allot_region_returned_dropped_total", Help: "Tokens of global keys the region's nodes gave back, which the region does not lend again (the parent counts them spent).",
		}, func() float64 { return float64(rs.Lost()) }),
	)
}
