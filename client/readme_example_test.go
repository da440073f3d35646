package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-dev/allot/client"
)

// The README's snippets, as compiled code (internal/readme checks that
// each is here): functions never run, for go test to compile and go vet
// to check.

var errTooManyRequests, errBadRequest = errors.New("429"), errors.New("400")

func handle() error { return nil }
func serve()        {}

// readmeUsingTheSDK is the README's "Using the SDK".
func readmeUsingTheSDK(ctx context.Context, apiKey, tenant, user, partner string, size int64) error {
	c, err := client.New(client.Config{
		Allocators: []string{"10.0.0.5:7070", "10.0.0.6:7070"}, // balanced, with failover
		NodeID:     "web-17",                                   // unique per node
		Gossip:     &client.GossipConfig{Bind: "0.0.0.0:7946", Join: []string{"10.0.1.2:7946"}},
		Registerer: prometheus.DefaultRegisterer,
	})
	if err != nil {
		return err
	}
	defer c.Close() // returns unused tokens, leaves the gossip pool

	if !c.Allow(ctx, "api-per-key", apiKey) {
		return errTooManyRequests // 429
	}

	// A cost per request; d also says Limit, Remaining, RetryAfter, ResetAfter
	// and Mode (lease, fallback or strict).
	d, err := c.AllowN(ctx, "uploads-bytes", tenant, size)
	if err != nil || !d.Allowed {
		return errTooManyRequests
	}

	// "10 per second AND 1,000 per hour": spends from both or from neither.
	d, err = c.AllowAll(ctx, 1, client.RuleKey{Rule: "burst", Key: user}, client.RuleKey{Rule: "sustained", Key: user})
	if err != nil || !d.Allowed {
		return errTooManyRequests
	}

	// Queue (bounded) until admitted: shaping.
	if err := c.Wait(ctx, "outbound-calls", partner); err != nil {
		return err
	}

	// Give tokens back when the request fails before doing any work.
	res, err := c.Reserve(ctx, "api-per-key", apiKey, 1)
	if err == nil && res.Allowed {
		if err := handle(); errors.Is(err, errBadRequest) {
			res.Cancel() // the token serves the next request
		}
	}

	// A handle on a rule known at start: no lookup by name per call, and an
	// unknown name is an error once, here.
	api, err := c.Limiter("api-per-key")
	if err != nil {
		return err
	}
	if api.Allow(ctx, apiKey) {
		serve()
	}
	return nil
}

// readmeGossip is the README's "Gossip" node.
func readmeGossip(hostname string) {
	client.New(client.Config{
		NodeID: hostname,
		Gossip: &client.GossipConfig{Bind: "0.0.0.0:7948", Join: []string{"127.0.0.1:7946"}},
		// Allocators: []string{"127.0.0.1:7070", "127.0.0.1:7071"}, // or, or as well, by address
	})
}

// readmeSecurityNodes is the README's "Security", nodes.
func readmeSecurityNodes(caPEM []byte, keys [][]byte) (*client.Client, error) {
	cert, _ := tls.LoadX509KeyPair("certs/web-17.crt", "certs/web-17.key")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := client.New(client.Config{
		Allocators: []string{"alloc-1.internal:7070"},
		NodeID:     "web-17", // the name in its certificate
		TLS:        &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
		Gossip:     &client.GossipConfig{Bind: "0.0.0.0:7946", Join: []string{"alloc-1.internal:7946"}, Keys: keys},
	})
	return c, err
}

var (
	_ = readmeUsingTheSDK
	_ = readmeGossip
	_ = readmeSecurityNodes
	_ = configurationSettle
)

func complete(string) int64 { return 1 }

// configurationSettle is configuration.md's "Costs settled after the work".
func configurationSettle(ctx context.Context, c *client.Client, apiKey, prompt string) error {
	res, err := c.Reserve(ctx, "llm-tokens", apiKey, 1) // an estimate of 1
	if err != nil || !res.Allowed {
		return errTooManyRequests
	}
	used := complete(prompt) // the work: the tokens it used
	if err := res.Settle(used); err != nil {
		slog.Warn("settled in part", "err", err) // ErrDebtAboveMax: past max_debt
	}
	return nil
}
