package redistest

import (
	"strconv"
	"testing"
)

// StartTLS launches a dedicated redis-server that speaks only TLS, with the
// given certificate and key (PEM files), on a free loopback port, and stops
// it when the test ends. Clients need no certificate of their own.
func StartTLS(t testing.TB, certFile, keyFile string) *Server {
	t.Helper()
	binary(t)
	dir := t.TempDir()
	var err error
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		// launch passes --port first; the later --port 0 turns plaintext off.
		s := &Server{Port: port, dir: dir, args: []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no"}}
		if err = s.launch(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: TLS server: %v", err)
	return nil
}
