// Package client is the Allot SDK that a service embeds to enforce global
// rate limits locally.
//
// A Client keeps a local token bucket per (rule, key) and fills it with
// leases: batches of tokens borrowed from the central allocator. A decision
// on a key that holds lease tokens is an in-memory step — no network, no
// clock read, no allocation. The next lease is asked for ahead of need, at
// a low watermark, and its size follows the key's observed rate, so a
// steady stream never waits.
//
// A new key waits for its first lease while the allocator answers (at
// most Config.Lease.FirstLeaseWait): nothing of a key is admitted without
// the allocator's say while it can have it. When the allocator cannot be
// reached and a key has no lease in force, the key runs on the node's
// fallback allowance, the rule's limit divided by the number of live
// nodes, and what it admitted that way is reported to the allocator, which
// debits it; rules with failure: closed deny instead. Strict rules
// (sliding_log, or strict: true) ask the allocator for every request.
//
// Use one Client per process:
//
//	c, err := client.New(client.Config{Allocators: []string{"10.0.0.5:7070"}})
//	if err != nil { ... }
//	defer c.Close()
//	if !c.Allow(ctx, "api-per-key", apiKey) {
//		// answer 429
//	}
//
// AllowN decides a request that costs n tokens and returns the Decision
// (remaining, retry-after, and the Mode that decided); AllowAll checks
// several limits and spends from all or none; Wait queues until a request
// may proceed. Close returns the node's unused tokens and leaves the gossip
// pool.
package client
