// Package certs loads TLS certificates and CA bundles from PEM files and
// reloads them when the files change, so that renewed certificates are used
// without a restart.
package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

// Files names the PEM files of one TLS identity.
type Files struct {
	// Cert is the certificate chain, leaf first. Required.
	Cert string
	// Key is the certificate's private key. Required.
	Key string
	// CA is a bundle of CA certificates: the CAs a server accepts client
	// certificates from, or the CAs a client trusts servers by. Optional.
	CA string
}

// Watcher holds the certificate and CA pool last loaded from its files.
// Handshakes read them without a lock; Reload and the poll loop replace
// them when the files' contents change. A set of files that does not load
// (a key that no longer matches during a rotation, say) keeps the previous
// certificate in use and is logged once.
type Watcher struct {
	files Files
	log   *slog.Logger

	mu       sync.Mutex // serializes loads
	loaded   [sha256.Size]byte
	rejected string // the last failure, logged once

	cert atomic.Pointer[tls.Certificate]
	pool atomic.Pointer[x509.CertPool]

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Load reads files and returns a Watcher serving them. An error names the
// file at fault.
func Load(files Files, log *slog.Logger) (*Watcher, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("certs: a certificate file and a key file are both required")
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{files: files, log: log}
	if _, err := w.load(); err != nil {
		return nil, err
	}
	return w, nil
}

// Reload reads the files again and reports whether the certificate or the
// CA pool changed. On error the previous ones stay in use.
func (w *Watcher) Reload() (bool, error) { return w.load() }

// Poll checks the files every interval of clk until Stop. A change takes
// effect from the next handshake.
func (w *Watcher) Poll(clk clock.Clock, every time.Duration) {
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		t := clk.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C():
			}
			if changed, err := w.load(); err == nil && changed {
				w.log.Info("tls: certificate files changed; reloaded", "cert", w.files.Cert, "ca", w.files.CA)
			}
			t.Reset(every)
		}
	}()
}

// Stop ends Poll and waits for it.
func (w *Watcher) Stop() {
	w.stopOnce.Do(func() {
		if w.stop != nil {
			close(w.stop)
			<-w.done
		}
	})
}

// Certificate is the certificate in use.
func (w *Watcher) Certificate() *tls.Certificate { return w.cert.Load() }

// CAs is the CA pool in use, or nil when Files.CA is empty.
func (w *Watcher) CAs() *x509.CertPool { return w.pool.Load() }

// ServerConfig is a server-side TLS config that takes the current
// certificate, and the current CA pool as the client CAs, at each
// handshake. With requireClientCert, a client must present a certificate
// that the CA pool verifies (mTLS).
func (w *Watcher) ServerConfig(requireClientCert bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*w.cert.Load()}}
			if requireClientCert {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, w.pool.Load()
			}
			return c, nil
		},
	}
}

// ClientConfig is a client-side TLS config that presents the current
// certificate at each handshake and trusts the CA pool loaded at Load (a
// new CA bundle needs a restart of the client). serverName, when set, is
// the name every server's certificate must carry.
func (w *Watcher) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		RootCAs:    w.pool.Load(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return w.cert.Load(), nil
		},
	}
}

// load reads the files; it installs them when their contents differ from
// what is in use.
func (w *Watcher) load() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	certPEM, err := os.ReadFile(w.files.Cert)
	if err != nil {
		return false, w.reject(fmt.Errorf("certs: certificate: %w", err))
	}
	keyPEM, err := os.ReadFile(w.files.Key)
	if err != nil {
		return false, w.reject(fmt.Errorf("certs: key: %w", err))
	}
	var caPEM []byte
	if w.files.CA != "" {
		if caPEM, err = os.ReadFile(w.files.CA); err != nil {
			return false, w.reject(fmt.Errorf("certs: CA bundle: %w", err))
		}
	}
	sum := digest(certPEM, keyPEM, caPEM)
	if sum == w.loaded && w.cert.Load() != nil {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, w.reject(fmt.Errorf("certs: %s with %s: %w", w.files.Cert, w.files.Key, err))
	}
	var pool *x509.CertPool
	if w.files.CA != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return false, w.reject(fmt.Errorf("certs: %s: no PEM certificate in it", w.files.CA))
		}
	}
	w.cert.Store(&cert)
	w.pool.Store(pool)
	w.loaded, w.rejected = sum, ""
	return true, nil
}

// reject logs a failure to reload, once until it changes, and returns it.
func (w *Watcher) reject(err error) error {
	if w.cert.Load() == nil {
		return err // the first load: the caller reports it
	}
	if msg := err.Error(); msg != w.rejected {
		w.log.Error("tls: certificate files do not load; keeping the previous certificate", "err", err)
		w.rejected = msg
	}
	return err
}

func digest(parts ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}
