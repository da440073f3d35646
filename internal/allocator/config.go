package allocator

import (
	"log/slog"
	"time"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

// Config is what an allocator needs. The zero value runs the built-in
// example rules on the embedded store, listening on a free loopback port.
// A zero field takes DefaultConfig's value, which is set and explained
// there; a field DefaultConfig leaves zero is off until set, as its doc
// says. cmd/allocator's flags start from DefaultConfig too.
type Config struct {
	// Listen is the gRPC address. (cmd/allocator's --listen defaults to
	// Allot's port, 127.0.0.1:7070.)
	Listen string
	// RulesFile is a YAML rules file, reloaded by Reload. default: none, the
	// built-in example rules
	RulesFile string
	// Rules, when set and RulesFile is empty, is the rule set to serve.
	Rules *rules.Set
	// EnvoyConfigDir is a directory of envoyproxy/ratelimit config files,
	// one domain per *.yaml file as that service reads them, added to the
	// rules' envoy section and reloaded with them. default: none
	EnvoyConfigDir string
	// RedisURL selects the Redis store (redis:// or rediss://). default:
	// none, the embedded memory store
	RedisURL string
	// RedisCluster makes RedisURL name the seed nodes of a Redis Cluster:
	// "redis://h1:p1?addr=h2:p2&addr=h3:p3". default: false
	RedisCluster bool
	// Store, when set, is used instead of RedisURL or memory. The allocator
	// does not close it.
	Store store.Store
	// MetricsListen serves /metrics and /healthz over HTTP. default: none
	MetricsListen string
	// MemoryMaxKeys bounds the keys the embedded memory store holds: past
	// it a call on a new key is refused with ResourceExhausted, while the
	// keys held keep working.
	MemoryMaxKeys int
	// RedisMaxKeys bounds the keys of the Redis database (DBSIZE): at it a
	// call on a new key is refused with ResourceExhausted, while the keys
	// held keep working. Negative: no cap.
	RedisMaxKeys int64
	// NewKeysPerNode bounds the keys one node may add to the store per
	// second. Negative: no cap.
	NewKeysPerNode float64
	// StoreTimeout bounds each store call.
	StoreTimeout time.Duration
	// Parent is a parent allocator's gRPC address: this allocator is then
	// a region, and leases the rules of scope global from the parent as a
	// node does, lending its own nodes out of those leases
	// (internal/region). Plaintext unless ParentTLS is set. default:
	// none; global rules are served from the store, as regional ones
	Parent string
	// ParentTLS dials Parent over TLS, presenting a client certificate.
	ParentTLS ParentTLSConfig
	// ParentTokenFile holds the token sent to Parent with every call
	// ("authorization: Bearer <token>"), for a parent started with
	// --auth-token-file: its first token line, in that file's format.
	// Reloaded by ReloadCredentials. Needs ParentTLS. default: none
	ParentTokenFile string
	// Region is this allocator's name at its parent, its node id there:
	// unique among the allocators under the parent: two under one name
	// would share one holder's lease there and lend its tokens twice, so a
	// region of several allocators names each.
	// Required with Parent.
	Region string
	// Regions is how many regions share Parent, at least: what a region
	// cut off from its parent divides a global rule by for a key the
	// parent told it nothing of (region.Config.Regions). default: what
	// the parent told it of other keys, else 1
	Regions int
	// Limits bound the input of every call. default: server.DefaultLimits()
	Limits server.Limits
	// GossipBind, when set, joins a memberlist pool as an allocator, so that
	// nodes and other allocators find this one. default: no gossip
	GossipBind string
	// GossipJoin lists pool members to contact at start.
	GossipJoin []string
	// Advertise is the gRPC address nodes should dial, told through gossip.
	// default: the listen address, unless it is unspecified (0.0.0.0)
	Advertise string
	// EnvoyListen, when set, serves Envoy's rate limit service (and health
	// checks) on a gRPC port of its own as well as on Listen. default: Listen only
	EnvoyListen string
	// Logger receives the allocator's log lines.
	Logger *slog.Logger

	// TLS serves gRPC over TLS, or mTLS with TLS.ClientCAFile.
	// default: plaintext
	TLS TLSConfig
	// MetricsTLS serves /metrics and /healthz over TLS with the gRPC
	// certificate: MetricsTLS, or MetricsMTLS to ask for a client
	// certificate from TLS.ClientCAFile too. default: plaintext
	MetricsTLS string
	// TokenFile holds shared tokens, one a line: every call but health
	// checks must carry one as "authorization: Bearer <token>". Several
	// tokens allow a rotation. Needs TLS. default: no token
	TokenFile string
	// Reflection and GetRules say who may use server reflection and
	// GetRules: AccessAuthenticated, AccessOn or AccessOff. Nodes need
	// GetRules unless they are given Config.Rules.
	Reflection, GetRules Access
	// MaxInFlight bounds the Acquire, Release, Check and ShouldRateLimit
	// calls served at once; a call over it is refused with ResourceExhausted at once.
	// Negative: no bound.
	MaxInFlight int
	// MaxInFlightPerNode bounds one node_id's calls in flight, so that a
	// flooding node cannot take the others' slots. Negative: no bound.
	MaxInFlightPerNode int
	// GossipKeyringFile holds the gossip keys, base64, one a line, the
	// first one encrypting (see fallback.ReadKeyring). default: gossip in
	// the clear
	GossipKeyringFile string
	// AdminTokenFile holds the Admin service's tokens, one a line, each
	// optionally after a name and a space for the audit log ("alice
	// <token>"): callers send one as "authorization: Bearer <token>". These
	// tokens admit Admin calls only, and fleet tokens never do. Needs TLS.
	// default: none
	AdminTokenFile string
	// AdminIdentities are the client certificate names (a DNS or URI SAN,
	// or the CN) admitted to the Admin service, with mTLS. default: none.
	// With neither this nor AdminTokenFile, the Admin service refuses
	// every call.
	AdminIdentities []string
	// OverridesPoll is how often the store's runtime overrides are read
	// for changes other allocators made.
	OverridesPoll time.Duration
	// Clock paces the store probe, the certificate poll and log rate
	// limits.
	Clock clock.Clock
}

// DefaultConfig is the configuration a zero field of Config takes, each
// value with its reason. What it leaves zero (RulesFile, RedisURL, the
// listeners but Listen, TLS files, tokens, gossip) is off until set.
func DefaultConfig() Config {
	return Config{
		Listen:         "127.0.0.1:0",                // a free loopback port: tests and embedded allocators
		MemoryMaxKeys:  store.DefaultMemoryMaxKeys,   // store says why
		RedisMaxKeys:   store.DefaultRedisMaxKeys,    // store says why
		NewKeysPerNode: server.DefaultNewKeysPerNode, // server says why
		StoreTimeout:   server.DefaultStoreTimeout,   // server says why
		Logger:         slog.Default(),
		TLS: TLSConfig{
			NodeIdentity: "{node}",        // a node's certificate names its node_id, and nothing else
			Reload:       5 * time.Second, // a renewed certificate is served within seconds of its write
		},
		// The fleet's callers (a client certificate or the token; everyone
		// when neither is configured): nodes need GetRules, and what the
		// service is, is theirs to see.
		Reflection: AccessAuthenticated,
		GetRules:   AccessAuthenticated,
		// A healthy fleet keeps a few calls in flight (each takes well
		// under a millisecond): the bounds only cut in when calls pile up
		// behind a slow store or a flood.
		MaxInFlight:        256,
		MaxInFlightPerNode: 32,
		// Well within the default lease refresh (200ms), so that a change
		// made on another allocator reaches the nodes within about one
		// refresh. A poll is one pipelined HGET a rule.
		OverridesPoll: 100 * time.Millisecond,
		Clock:         clock.Real(),
	}
}

// fill gives every zero field DefaultConfig's value. MemoryMaxKeys,
// RedisMaxKeys, NewKeysPerNode and Limits are left to the store and the
// server, which fill them the same.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = d.StoreTimeout
	}
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.TLS.NodeIdentity == "" {
		c.TLS.NodeIdentity = d.TLS.NodeIdentity
	}
	if c.TLS.Reload == 0 { // negative: only on ReloadCredentials
		c.TLS.Reload = d.TLS.Reload
	}
	if c.Reflection == "" {
		c.Reflection = d.Reflection
	}
	if c.GetRules == "" {
		c.GetRules = d.GetRules
	}
	if c.MaxInFlight == 0 { // negative: no bound
		c.MaxInFlight = d.MaxInFlight
	}
	if c.MaxInFlightPerNode == 0 {
		c.MaxInFlightPerNode = d.MaxInFlightPerNode
	}
	if c.OverridesPoll == 0 { // negative: refused by checkAdmin
		c.OverridesPoll = d.OverridesPoll
	}
}

// bound reads a MaxInFlight setting: negative is no bound (0 to the
// shedder).
func bound(v int) int { return max(v, 0) }
