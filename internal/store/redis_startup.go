package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// firstContact sends one PING at start-up and tells a Redis that is down
// from one that is misconfigured. Down (a refused or unresolvable dial, no
// answer in time, a loading or failing-over server) is not an error: the
// allocator starts, answers Unavailable and serves once Redis is up. A
// misconfiguration would never serve, so it fails now, saying what is
// wrong: refused credentials or database, a TLS failure, TLS on one side
// only, or a server that does not speak Redis.
func firstContact(client redis.UniversalClient, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Second))
	defer cancel()
	err := client.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	return misconfiguration(client, err, timeout)
}

func misconfiguration(client redis.UniversalClient, err error, timeout time.Duration) error {
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		if transient(rerr) {
			return nil
		}
		return fmt.Errorf("redis refused the connection: %w", err)
	case tlsFailure(err):
		return fmt.Errorf("TLS with redis failed: %w (check the CA that signed Redis's certificate and the host name in the URL)", err)
	case dialFailure(err):
		return nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("redis closed the connection at the first command (%v): a Redis that only speaks TLS needs a rediss:// URL", err)
	case timedOut(err):
		if addr, tlsOn := firstAddr(client); tlsOn && speaksPlainRESP(addr, timeout) {
			return fmt.Errorf("the URL says rediss:// but %s answers in plaintext: use redis://, or turn TLS on in Redis", addr)
		}
		return nil // hung or slow: treated as down
	}
	return fmt.Errorf("%w (is this a Redis server?)", err)
}

func tlsFailure(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
		alert    tls.AlertError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		strings.HasPrefix(err.Error(), "tls: ")
}

func dialFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && !timedOut(err)
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// firstAddr is the address the client dials first and whether it uses TLS.
func firstAddr(client redis.UniversalClient) (string, bool) {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().Addr, c.Options().TLSConfig != nil
	case *redis.ClusterClient:
		if addrs := c.Options().Addrs; len(addrs) > 0 {
			return addrs[0], c.Options().TLSConfig != nil
		}
	}
	return "", false
}

// speaksPlainRESP reports whether addr answers a plaintext PING with a
// Redis reply: the tell-tale of rediss:// pointed at a plaintext Redis,
// which otherwise looks like a hung server (it waits for the end of a
// "command" that is really a TLS hello).
func speaksPlainRESP(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return false
	}
	return buf[0] == '+' || buf[0] == '-'
}
