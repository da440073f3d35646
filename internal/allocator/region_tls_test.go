package allocator_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/certs/certstest"
)

const wrongToken = "not-the-fleet-token-0123456789"

// securedParent runs a parent allocator over mTLS with fleet tokens, on
// the global rules; regions' certificates must name their region.
func securedParent(t *testing.T, p *pki, rulesFile string) *allocator.Allocator {
	t.Helper()
	tokens := writeFile(t, filepath.Join(p.dir, "fleet.tokens"), "# the fleet's\n"+fleetToken+"\n")
	return serve(t, allocator.Config{RulesFile: rulesFile, Logger: quiet(),
		TLS:       allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile},
		TokenFile: tokens})
}

// regionOf runs a region of parent named name, with a certificate naming
// it and token in its token file, and returns its logs and a plaintext
// client of it.
func regionOf(t *testing.T, p *pki, parent *allocator.Allocator, rulesFile, name, token string) (*allocator.Allocator, allotv1.AllocatorClient, *syncBuffer) {
	t.Helper()
	cert, key := p.ca.Issue(t, certstest.Names{CN: name, DNS: []string{name}}).Write(t, p.dir, name)
	tokFile := writeFile(t, filepath.Join(p.dir, name+".token"), token+"\n")
	logs := &syncBuffer{}
	a, conn := start(t, allocator.Config{RulesFile: rulesFile, Parent: parent.Addr(), Region: name,
		ParentTLS:       allocator.ParentTLSConfig{CertFile: cert, KeyFile: key, CAFile: p.caFile},
		ParentTokenFile: tokFile, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	return a, allotv1.NewAllocatorClient(conn), logs
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func gauge(t *testing.T, a *allocator.Allocator, name string) float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A region reaches a parent that takes mTLS and fleet tokens with the
// fleet's CA, a certificate naming the region and the token, and lends
// the global key; a region with a wrong token is refused: it logs that the
// parent refuses its credentials, its parent_up is 0, and its global key
// lends nothing while its regional one is served, until its token file
// is put right and reloaded.
func TestRegionReachesItsParentOverTLSWithAToken(t *testing.T) {
	p := newPKI(t)
	rulesFile := filepath.Join(p.dir, "rules.yaml")
	writeRules(t, rulesFile, globalRules)
	parent := securedParent(t, p, rulesFile)

	good, api, _ := regionOf(t, p, parent, rulesFile, "eu", fleetToken)
	var granted int64
	for deadline := time.Now().Add(5 * time.Second); granted == 0 && time.Now().Before(deadline); {
		resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{{Rule: "g", Key: "k", Want: 10}}})
		if err != nil {
			t.Fatal(err)
		}
		if granted = resp.Leases[0].Granted; granted == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if granted != 10 {
		t.Fatalf("the region with the right CA, certificate and token lent %d of the global key, want 10", granted)
	}
	if up := gauge(t, good, "allot_region_parent_up"); up != 1 {
		t.Errorf("allot_region_parent_up = %v, want 1", up)
	}

	bad, api, logs := regionOf(t, p, parent, rulesFile, "us", wrongToken)
	for range 5 {
		resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{
			{Rule: "g", Key: "k", Want: 10}, {Rule: "r", Key: "k", Want: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if g, r := resp.Leases[0].Granted, resp.Leases[1].Granted; g != 0 || r != 1 {
			t.Fatalf("a refused region lent %d of the global key (want 0) and %d of the regional one (want 1)", g, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec := waitRecord(t, logs, "region: the parent refuses this region's credentials (its token or certificate); global keys lend nothing until it accepts them")
	if err, _ := rec["err"].(string); !strings.Contains(err, "token not accepted") {
		t.Errorf("the refusal logged %q: want the parent's \"token not accepted\"", err)
	}
	if up := gauge(t, bad, "allot_region_parent_up"); up != 0 {
		t.Errorf("a refused region's allot_region_parent_up = %v, want 0", up)
	}

	// The right token written to its file and reloaded (SIGHUP), the
	// region is served once its backoff ends.
	writeFile(t, filepath.Join(p.dir, "us.token"), fleetToken+"\n")
	if err := bad.ReloadCredentials(); err != nil {
		t.Fatal(err)
	}
	waitRecord(t, logs, "the token to the parent reloaded")
	for granted, deadline := int64(0), time.Now().Add(15*time.Second); granted == 0; {
		resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{{Rule: "g", Key: "k", Want: 10}}})
		if err != nil {
			t.Fatal(err)
		}
		if granted = resp.Leases[0].Granted; granted == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the region lent nothing of the global key 15s after its token was put right and reloaded")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRecord(t, logs, "region: the parent answers")
}

// The parent's TLS files and token are a config error when they do not
// go together or do not load, naming the flags and the file.
func TestRegionParentCredentialErrors(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	short := writeFile(t, filepath.Join(dir, "short.token"), "short\n")
	empty := writeFile(t, filepath.Join(dir, "empty.token"), "# nothing\n")
	good := writeFile(t, filepath.Join(dir, "good.token"), fleetToken+"\n")
	notPEM := writeFile(t, filepath.Join(dir, "ca.txt"), "not a certificate\n")
	base := allocator.Config{Parent: "127.0.0.1:1", Region: "eu", Logger: quiet()}
	for _, c := range []struct {
		name string
		tls  allocator.ParentTLSConfig
		tok  string
		want []string
	}{
		{"cert without key", allocator.ParentTLSConfig{CertFile: p.certFile}, "", []string{"--parent-tls-cert and --parent-tls-key go together"}},
		{"server name in plaintext", allocator.ParentTLSConfig{ServerName: "parent"}, "", []string{"--parent-tls-server-name needs TLS to the parent"}},
		{"token in plaintext", allocator.ParentTLSConfig{}, good, []string{"--parent-token-file needs TLS to the parent", "plaintext"}},
		{"CA alone missing", allocator.ParentTLSConfig{CAFile: missing}, "", []string{"--parent-tls-ca", missing}},
		{"CA alone not PEM", allocator.ParentTLSConfig{CAFile: notPEM}, good, []string{"--parent-tls-ca", notPEM, "no PEM certificate"}},
		{"missing cert", allocator.ParentTLSConfig{CertFile: missing, KeyFile: p.keyFile}, "", []string{"--parent-tls-cert", missing}},
		{"missing CA", allocator.ParentTLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: missing}, "", []string{"--parent-tls-ca", missing}},
		{"CA not PEM", allocator.ParentTLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, CAFile: notPEM}, "", []string{"--parent-tls-ca", notPEM}},
		{"missing token", allocator.ParentTLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, missing, []string{"--parent-token-file", missing}},
		{"short token", allocator.ParentTLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, short, []string{"--parent-token-file", short, "want at least 16"}},
		{"no token", allocator.ParentTLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, empty, []string{"--parent-token-file", empty, "no token"}},
	} {
		cfg := base
		cfg.ParentTLS, cfg.ParentTokenFile = c.tls, c.tok
		_, err := allocator.New(cfg)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err %v, want it to say %q", c.name, err, w)
			}
		}
	}
	cfg := allocator.Config{ParentTokenFile: good, Logger: quiet()}
	if _, err := allocator.New(cfg); err == nil || !strings.Contains(err.Error(), "give --parent too") {
		t.Errorf("a parent token without --parent: %v", err)
	}
}

// A region reaches a parent that authenticates by token alone over TLS
// with the CA bundle and no certificate of its own; with a server name the
// parent's certificate does not carry, the handshake fails and the region
// lends nothing of the global key.
func TestRegionReachesItsParentWithACAAlone(t *testing.T) {
	p := newPKI(t)
	rulesFile := filepath.Join(p.dir, "rules.yaml")
	writeRules(t, rulesFile, globalRules)
	tokens := writeFile(t, filepath.Join(p.dir, "fleet.tokens"), fleetToken+"\n")
	parent := serve(t, allocator.Config{RulesFile: rulesFile, Logger: quiet(),
		TLS: allocator.TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile}, TokenFile: tokens})
	tokFile := writeFile(t, filepath.Join(p.dir, "region.token"), fleetToken+"\n")
	lend := func(serverName string) (*allocator.Allocator, int64) {
		a, conn := start(t, allocator.Config{RulesFile: rulesFile, Parent: parent.Addr(), Region: "eu" + serverName,
			ParentTLS:       allocator.ParentTLSConfig{CAFile: p.caFile, ServerName: serverName},
			ParentTokenFile: tokFile, Logger: quiet()})
		api := allotv1.NewAllocatorClient(conn)
		var granted int64
		for deadline := time.Now().Add(3 * time.Second); granted == 0 && time.Now().Before(deadline); {
			resp, err := api.Acquire(ctx(t), &allotv1.AcquireRequest{NodeId: "n1", Requests: []*allotv1.LeaseRequest{{Rule: "g", Key: "k", Want: 10}}})
			if err != nil {
				t.Fatal(err)
			}
			if granted = resp.Leases[0].Granted; granted == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		return a, granted
	}
	if _, granted := lend(""); granted != 10 {
		t.Fatalf("a region with the CA alone and the token lent %d of the global key, want 10", granted)
	}
	a, granted := lend("not-the-parent.example")
	if granted != 0 {
		t.Errorf("a region that wants a name the parent's certificate lacks lent %d of the global key, want 0", granted)
	}
	if up := gauge(t, a, "allot_region_parent_up"); up != 0 {
		t.Errorf("its allot_region_parent_up = %v, want 0", up)
	}
}
