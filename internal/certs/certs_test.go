package certs

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/certs/certstest"
	"github.com/allot-dev/allot/internal/clock"
)

func serial(w *Watcher) string { return w.Certificate().Leaf.SerialNumber.String() }

// The poll (clock injected) installs rewritten files; unchanged files and
// a broken pair leave the certificate in use.
func TestPollReloadsChangedFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	first := ca.Issue(t, certstest.Loopback)
	certFile, keyFile := first.Write(t, dir, "server")
	caFile := ca.Write(t, dir, "ca.crt")
	w, err := Load(Files{Cert: certFile, Key: keyFile, CA: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if serial(w) != first.Cert.SerialNumber.String() || w.CAs() == nil {
		t.Fatal("Load did not install the files")
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	w.Poll(clk, 5*time.Second)
	defer w.Stop()
	poll := func() {
		t.Helper()
		if !clk.WaitTimers(1, 5*time.Second) {
			t.Fatal("the poll is not waiting")
		}
		clk.Advance(5 * time.Second)
		if !clk.WaitTimers(1, 5*time.Second) {
			t.Fatal("the poll did not come back")
		}
	}
	poll()
	if serial(w) != first.Cert.SerialNumber.String() {
		t.Fatal("unchanged files replaced the certificate")
	}
	second := ca.Issue(t, certstest.Loopback)
	second.Write(t, dir, "server")
	poll()
	if serial(w) != second.Cert.SerialNumber.String() {
		t.Fatal("the poll did not install the rewritten files")
	}
	if err := os.WriteFile(certFile, ca.Issue(t, certstest.Loopback).CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	poll()
	if serial(w) != second.Cert.SerialNumber.String() {
		t.Fatal("a certificate with the wrong key replaced the one in use")
	}
	if _, err := w.Reload(); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("Reload of a broken pair: %v, want an error naming the file", err)
	}
}

// ServerConfig serves the current certificate and asks for a client
// certificate from the current CA pool; ClientConfig presents the current
// certificate.
func TestServerAndClientConfigs(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, certstest.Loopback).Write(t, dir, "server")
	server, err := Load(Files{Cert: certFile, Key: keyFile, CA: ca.Write(t, dir, "ca.crt")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := ca.Issue(t, certstest.Names{CN: "node-1"}).Write(t, dir, "client")
	client, err := Load(Files{Cert: clientCert, Key: clientKey, CA: filepath.Join(dir, "ca.crt")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", server.ServerConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	peerCN := make(chan string, 1)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			peerCN <- err.Error()
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peerCN <- err.Error()
			return
		}
		peerCN <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), client.ClientConfig("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := <-peerCN; got != "node-1" {
		t.Fatalf("the server saw client %q, want node-1", got)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "ca")
	certFile, keyFile := ca.Issue(t, certstest.Loopback).Write(t, dir, "server")
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files Files
		want  string
	}{
		{Files{Cert: certFile}, "both required"},
		{Files{Cert: filepath.Join(dir, "missing.crt"), Key: keyFile}, "missing.crt"},
		{Files{Cert: certFile, Key: keyFile, CA: empty}, "empty.pem: no PEM certificate"},
		{Files{Cert: keyFile, Key: certFile}, "server.key"},
	} {
		if _, err := Load(c.files, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%+v): %v, want %q", c.files, err, c.want)
		}
	}
}
