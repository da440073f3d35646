package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/allot-dev/allot/internal/certs"
	"github.com/allot-dev/allot/internal/clock"
)

// nodeTLS builds the TLS configuration the service dials the allocators
// with: the CA to trust them by, and for mTLS the node's certificate, read
// again every few seconds so that a renewed one is used without a restart.
// stop ends the reloading. No --ca: plaintext (nil config).
func nodeTLS(o *options, log *slog.Logger) (cfg *tls.Config, stop func(), err error) {
	stop = func() {}
	if o.ca == "" {
		if o.cert != "" || o.tokenFile != "" {
			return nil, stop, errors.New("--cert and --token-file need --ca: the allocators' CA")
		}
		return nil, stop, nil
	}
	if (o.cert == "") != (o.key == "") {
		return nil, stop, errors.New("--cert and --key go together")
	}
	if o.cert == "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, stop, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, stop, fmt.Errorf("--ca %s: no PEM certificate in it", o.ca)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: o.serverName}, stop, nil
	}
	w, err := certs.Load(certs.Files{Cert: o.cert, Key: o.key, CA: o.ca}, log)
	if err != nil {
		return nil, stop, fmt.Errorf("--cert, --key, --ca: %w", err)
	}
	w.Poll(clock.Real(), 5*time.Second)
	return w.ClientConfig(o.serverName), w.Stop, nil
}

// readToken reads the first line of --token-file.
func readToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("--token-file %s: empty", file)
	}
	return tok, nil
}
