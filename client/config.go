package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allot-dev/allot/internal/clienthook"
	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/fallback"
	"github.com/allot-dev/allot/internal/lease"
	"github.com/allot-dev/allot/internal/rules"
)

// Config configures a Client. Only Allocators (or Rules, for a node that
// starts without an allocator) is required. A zero field takes
// DefaultConfig's value, which is set and explained there (go doc -src
// client.DefaultConfig); a field DefaultConfig leaves zero is off until
// set, as its doc says.
type Config struct {
	// Allocators lists the allocators' gRPC addresses (host:port). Calls are
	// balanced round-robin over the healthy ones. An allocator that fails a
	// call (no connection, no answer in time) is ejected and the call is
	// retried at once on another within its deadline; an ejected allocator
	// returns once it answers a health probe. With Gossip, allocators that
	// advertise themselves in the pool are added as they come and go.
	Allocators []string

	// NodeID names this node to the allocator and in gossip. It must be
	// unique in the fleet and stable while the process runs.
	NodeID string

	// Nodes is the least fleet size assumed for the fallback allowance
	// (limit/N) when gossip does not count the fleet: N is the largest of
	// this, the allocator's count of the key's holders, and the most
	// holders the node has seen on any key in the last five to ten minutes.
	Nodes int

	// Gossip, when set, joins a memberlist pool: the live nodes in it are
	// the N of the fallback allowance. default: no gossip
	Gossip *GossipConfig

	// Rules are used until the allocator's rules arrive, and for as long as
	// it cannot be reached: a node can start with no allocator at all. Give
	// every rule the node uses.
	// default: none; New then fails with ErrNoRules unless an allocator
	// sends its rules within StartTimeout
	Rules []Rule

	// RPCTimeout bounds each lease call, retries on other allocators
	// included; an allocator slower than its share of it is ejected. Once
	// a round trip is measured, a lease call waits at least three of them.
	RPCTimeout time.Duration

	// CheckTimeout bounds each strict decision's call.
	CheckTimeout time.Duration

	// StartTimeout is how long New waits for the allocator's rules; without
	// Config.Rules, New fails when they have not come by then.
	StartTimeout time.Duration

	// MaxWaiters bounds the callers queued in Wait per key; more get
	// ErrQueueFull at once.
	MaxWaiters int

	// Registerer receives the client's Prometheus collectors. Use one
	// registerer per Client. default: none
	Registerer prometheus.Registerer

	// Logger receives mode changes (rate-limited) and errors.
	Logger *slog.Logger

	// TLS, when set, dials the allocators over TLS with this configuration:
	// RootCAs to verify them by, and Certificates (or GetClientCertificate)
	// for mTLS. With ServerName empty, each allocator's certificate must
	// carry the host it is dialed by (the address given or advertised in
	// gossip); with ServerName set, every allocator's must carry that name.
	// default: plaintext
	TLS *tls.Config

	// Token is a shared secret sent with every call
	// ("authorization: Bearer <token>"), for allocators started with
	// --auth-token-file. It needs TLS: New refuses a token without it, so
	// that it never crosses the network in plaintext. default: none
	Token string

	// DialOptions are added to the gRPC connection. Use TLS for TLS.
	// default: none
	DialOptions []grpc.DialOption

	// Lease tunes lease bookkeeping; each zero field takes DefaultConfig's.
	Lease LeaseConfig

	// clock is the node's clock: the machine's unless this module's tests
	// set one through internal/clienthook, to step it.
	clock clock.Clock
}

// LeaseConfig tunes how leases are kept. DefaultConfig's values suit most
// fleets.
type LeaseConfig struct {
	// Sweep is how often leases are expired, rates sampled and idle keys
	// returned.
	Sweep time.Duration
	// BatchWindow is how long a refill waits to share one Acquire with
	// others.
	BatchWindow time.Duration
	// MaxKeys caps the keys the node keeps state for, over all rules. A new
	// key beyond it is decided by the allocator for each request (Check);
	// when the allocator cannot answer, a failure: closed rule denies and an
	// open one draws on one limit/N allowance that all such keys share. Idle
	// keys leave (their state is returned) and make room. The keys of
	// concurrency rules are capped apart, at as many: TakeSlot refuses a
	// new key beyond it (ErrNoSlot) until idle ones go.
	MaxKeys int
	// FirstLeaseWait is how long, at least, a request on a key with no
	// lease yet waits for the key's first lease while the allocator
	// answers: the node admits nothing of a key without the allocator's say
	// while it can have it (docs/bounds.md), so that a fleet that knows
	// nothing of its size cannot spend a burst per node. The wait lasts at
	// most this or the lease call's own timeout, whichever is longer, and
	// the caller's context; a request still without a lease then is
	// refused. Negative: never wait, refuse at once.
	FirstLeaseWait time.Duration
	// TokensOnly never asks for a share of a rule's rate: the node lives
	// on the tokens the allocator's bucket holds when it asks, as nodes
	// did before rate shares. Far from the allocator, or on a saturated
	// CPU, that loses part of the rate (docs/configuration.md, "Lease
	// settings"); it is here to compare, and for fleets that must not lend
	// rate ahead.
	TokensOnly bool
}

// GossipConfig joins the node to a memberlist pool. A zero Bind takes
// DefaultGossipConfig's; every other field is off until set, as its doc
// says.
type GossipConfig struct {
	// Bind is the gossip address, host:port; port 0 picks a free one.
	Bind string
	// Join lists members to contact at start; empty starts a new pool.
	Join []string
	// Fast uses short probe intervals, for loopback tests: a crashed node is
	// noticed in about a second instead of about five.
	Fast bool
	// Keys encrypt and authenticate the pool's messages: members without
	// one of them cannot join, count as nodes or advertise an allocator.
	// Keys[0] encrypts, the others are accepted too; each is 16, 24 or 32
	// bytes (the allocator's --gossip-keyring file holds them in base64).
	// Rotate with Client.SetGossipKeys. default: none, gossip in the clear
	Keys [][]byte
	// TrustAllocators, when set, are patterns (path.Match syntax, e.g.
	// "10.0.3.*:7070") an allocator's advertised address must match to be
	// dialed. With Config.TLS, an allocator is also used only if its
	// certificate verifies. default: every allocator in the pool
	TrustAllocators []string
}

// DefaultGossipConfig is what a zero field of GossipConfig takes, with
// its reason.
func DefaultGossipConfig() GossipConfig {
	return GossipConfig{
		Bind: fallback.DefaultBind, // loopback, a free port: heard by no other host until you choose an address (fallback says why)
	}
}

// Rule is a rate-limit rule given to a node directly; it has the fields of
// the allocator's rules file and the same defaults.
type Rule struct {
	Name      string
	Algorithm string // token_bucket | fixed_window | sliding_window | sliding_log
	Limit     int64
	Period    time.Duration
	Burst     int64
	Failure   string // open | closed; default open
	Strict    bool
	LeaseMin  int64
	LeaseMax  int64
	LeaseTTL  time.Duration
	// LeaseRefresh is how often a busy key is expected to refill.
	LeaseRefresh time.Duration
	// Shadow rules decide and count but never refuse (Decision.Shadow).
	Shadow bool
	// Overrides give some keys limits of their own.
	Overrides []Override
	// MaxDebt is the most a key may owe when settled costs pass their
	// estimates (Reservation.Settle). default (nil): one burst for a
	// token_bucket, none for a window rule
	MaxDebt *int64
	// MaxHold is a concurrency rule's max_hold (docs/configuration.md,
	// "Concurrency rules"). default: LeaseTTL/2
	MaxHold time.Duration
}

// Override gives one key (Key), or the keys a pattern matches (Match, where
// '*' stands for any run of characters), their own limit and burst. A key
// an exact override names takes it, else the first matching pattern.
type Override struct {
	Key, Match string
	Limit      int64
	Burst      int64 // token_bucket only; default the rule's, scaled
}

func toRuleSet(rs []Rule) (*rules.Set, error) {
	list := make([]rules.Rule, len(rs))
	for i, r := range rs {
		alg, err := rules.ParseAlgorithm(r.Algorithm)
		if err != nil {
			return nil, fmt.Errorf("client: Config.Rules[%d] %q: algorithm: %w", i, r.Name, err)
		}
		failure := rules.FailOpen
		switch r.Failure {
		case "", "open":
		case "closed":
			failure = rules.FailClosed
		default:
			return nil, fmt.Errorf("client: Config.Rules[%d] %q: failure: want open or closed, got %q", i, r.Name, r.Failure)
		}
		list[i] = rules.Rule{Name: r.Name, Algorithm: alg, Limit: r.Limit, Period: r.Period, Burst: r.Burst,
			Failure: failure, Strict: r.Strict, Shadow: r.Shadow, MaxDebt: r.MaxDebt, MaxHold: r.MaxHold,
			Lease: rules.LeaseTuning{Min: r.LeaseMin, Max: r.LeaseMax, TTL: r.LeaseTTL, Refresh: r.LeaseRefresh}}
		for _, o := range r.Overrides {
			list[i].Overrides = append(list[i].Overrides, rules.Override{Key: o.Key, Match: o.Match, Limit: o.Limit, Burst: o.Burst})
		}
	}
	set, err := rules.NewSet(list)
	if err != nil {
		return nil, fmt.Errorf("client: Config.Rules: %w", err)
	}
	return set, nil
}

// DefaultConfig is the configuration a zero field of Config takes, each
// value with its reason. The lease settings are the lease bookkeeping's own
// defaults (internal/lease's DefaultConfig, which says why); what has no
// default here (Allocators, Rules, Gossip, TLS, Token, Registerer,
// DialOptions) is off until set.
func DefaultConfig() Config {
	l := lease.DefaultConfig()
	return Config{
		NodeID:       defaultNodeID(),        // hostname-pid-random: unique in a fleet, and a log names the host
		Nodes:        1,                      // a lone node may use the whole limit: set the fleet's size, or gossip
		RPCTimeout:   l.RPCTimeout,           // a LAN allocator answers in a few ms
		CheckTimeout: 100 * time.Millisecond, // a strict decision holds its request up: fail over or fall back soon
		StartTimeout: time.Second,            // ample for a LAN allocator, short enough not to hold a start-up
		MaxWaiters:   1024,                   // bounds one key's queue, whose last caller would wait long anyway
		Logger:       slog.Default(),
		Lease: LeaseConfig{
			Sweep:       l.Sweep,
			BatchWindow: l.BatchWindow,
			MaxKeys:     l.MaxKeys,
			// A LAN allocator answers a first lease within a few ms;
			// longer, the request is better refused than held.
			FirstLeaseWait: 250 * time.Millisecond,
		},
	}
}

// fill gives every zero field DefaultConfig's value, and checks the rest.
func (c *Config) fill() error {
	if len(c.Allocators) == 0 && len(c.Rules) == 0 && (c.Gossip == nil || len(c.Gossip.Join) == 0) {
		return errors.New("client: no Config.Allocators, no gossip pool to find them in, and no Config.Rules to start with")
	}
	d := DefaultConfig()
	orDefault := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	orDefault(&c.RPCTimeout, d.RPCTimeout)
	orDefault(&c.CheckTimeout, d.CheckTimeout)
	orDefault(&c.StartTimeout, d.StartTimeout)
	orDefault(&c.Lease.Sweep, d.Lease.Sweep)
	orDefault(&c.Lease.BatchWindow, d.Lease.BatchWindow)
	if c.Lease.FirstLeaseWait == 0 { // negative: never wait
		c.Lease.FirstLeaseWait = d.Lease.FirstLeaseWait
	}
	if c.Lease.MaxKeys <= 0 {
		c.Lease.MaxKeys = d.Lease.MaxKeys
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = d.MaxWaiters
	}
	if c.Nodes <= 0 {
		c.Nodes = d.Nodes
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.clock == nil {
		c.clock = clock.Real()
	}
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	if len(c.NodeID) > maxNodeID {
		return fmt.Errorf("client: Config.NodeID is %d bytes, at most %d", len(c.NodeID), maxNodeID)
	}
	if !utf8.ValidString(c.NodeID) {
		return fmt.Errorf("client: Config.NodeID %q is not UTF-8", c.NodeID)
	}
	return c.checkSecurity()
}

func init() {
	clienthook.Register(func(cfg any, clk clock.Clock) { cfg.(*Config).clock = clk })
}

// The allocator's input limits, checked here so that one bad key cannot
// fail a whole batch of refills. Keys and node ids are UTF-8 too: they are
// protobuf strings.
const (
	maxKey    = 512
	maxNodeID = 128
)
