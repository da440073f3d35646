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
type Config struct {
	// Listen is the gRPC address. default: "127.0.0.1:0" (cmd/allocator
	// passes 127.0.0.1:7070)
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
	// keys held keep working. default: store.DefaultMemoryMaxKeys
	MemoryMaxKeys int
	// RedisMaxKeys bounds the keys of the Redis database (DBSIZE): at it a
	// call on a new key is refused with ResourceExhausted, while the keys
	// held keep working. Negative: no cap. default: store.DefaultRedisMaxKeys
	RedisMaxKeys int64
	// NewKeysPerNode bounds the keys one node may add to the store per
	// second. Negative: no cap. default: server.DefaultNewKeysPerNode
	NewKeysPerNode float64
	// StoreTimeout bounds each store call. default: 100ms
	StoreTimeout time.Duration
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
	// Logger. default: slog.Default()
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
	// GetRules unless they are given Config.Rules. default: AccessAuthenticated
	Reflection, GetRules Access
	// MaxInFlight bounds the Acquire, Release, Check and ShouldRateLimit
	// calls served at once; a call over it is refused with ResourceExhausted at once.
	// Negative: no bound. default: 256
	MaxInFlight int
	// MaxInFlightPerNode bounds one node_id's calls in flight, so that a
	// flooding node cannot take the others' slots. Negative: no bound.
	// default: 32
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
	// for changes other allocators made. default: 100ms
	OverridesPoll time.Duration
	// Clock paces the store probe, the certificate poll and log rate
	// limits. default: the real clock
	Clock clock.Clock
}

// bound reads a MaxInFlight setting: 0 is the default, negative no bound.
func bound(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func (a *Allocator) storeTimeout() time.Duration {
	if a.cfg.StoreTimeout > 0 {
		return a.cfg.StoreTimeout
	}
	return 100 * time.Millisecond
}
