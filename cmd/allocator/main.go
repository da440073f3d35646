// Command allocator is Allot's central allocator: it lends rate-limit tokens
// to nodes over gRPC, keeping the truth in Redis or, alone, in memory.
//
// Every flag may also be set by an environment variable: --listen by
// ALLOT_LISTEN, --redis by ALLOT_REDIS, and so on. A flag wins over its
// variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
)

type options struct {
	listen       string
	config       string
	redis        string
	redisCluster bool
	metrics      string
	storeTimeout time.Duration
	drainTimeout time.Duration
	logLevel     string
	logFormat    string
	gossip       string
	join         string
	advertise    string

	tlsCert, tlsKey, tlsClientCA string
	tlsNodeID                    string
	tlsReload                    time.Duration
	metricsTLS                   string
	tokenFile                    string
	reflection, getRules         string
	maxInFlight, maxPerNode      int
	memoryMaxKeys                int
	redisMaxKeys                 int64
	newKeysPerNode               float64
	gossipKeyring                string
	envoyListen                  string
	envoyConfigDir               string
	adminTokenFile               string
	adminIdentities              string
	overridesPoll                time.Duration
	parent, region               string
	regions                      int
	parentTLSCA, parentTLSCert   string
	parentServerName             string
	parentTLSKey, parentToken    string
}

// The defaults of the flags that are the command's own; the others are
// allocator.DefaultConfig's.
const (
	defaultListen       = "127.0.0.1:7070" // Allot's port, as nodes' Config.Allocators name it
	defaultMetrics      = "127.0.0.1:9090" // on loopback until opened to a scraper
	defaultDrainTimeout = 10 * time.Second // calls in flight take milliseconds; a deploy waits no longer
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "allocator:", err)
		os.Exit(1)
	}
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	d := allocator.DefaultConfig() // each default's reason is there
	fs := flag.NewFlagSet("allocator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", defaultListen, "gRPC listen address (ALLOT_LISTEN)")
	fs.StringVar(&o.config, "config", "", "rules file in YAML; reloaded on SIGHUP (ALLOT_CONFIG). Default: the built-in example rules")
	fs.StringVar(&o.redis, "redis", "", "Redis URL, redis:// or rediss:// (ALLOT_REDIS). Default: the embedded memory store")
	fs.BoolVar(&o.redisCluster, "redis-cluster", false, "--redis names Redis Cluster seed nodes: redis://h1:p1?addr=h2:p2 (ALLOT_REDIS_CLUSTER)")
	fs.StringVar(&o.metrics, "metrics", defaultMetrics, "HTTP address of /metrics and /healthz; empty to disable (ALLOT_METRICS)")
	fs.DurationVar(&o.storeTimeout, "store-timeout", d.StoreTimeout, "deadline of each store call (ALLOT_STORE_TIMEOUT)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", defaultDrainTimeout, "how long SIGTERM waits for calls in flight (ALLOT_DRAIN_TIMEOUT)")
	fs.StringVar(&o.gossip, "gossip", "", "memberlist address to gossip on, host:port; empty disables (ALLOT_GOSSIP)")
	fs.StringVar(&o.join, "join", "", "comma-separated gossip members to join (ALLOT_JOIN)")
	fs.StringVar(&o.advertise, "advertise", "", "gRPC address nodes should dial, told through gossip (ALLOT_ADVERTISE). Default: --listen")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain: serve gRPC over TLS (ALLOT_TLS_CERT). Default: plaintext")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert (ALLOT_TLS_KEY)")
	fs.StringVar(&o.tlsClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates signed by it, mTLS (ALLOT_TLS_CLIENT_CA)")
	fs.StringVar(&o.tlsNodeID, "tls-node-id", d.TLS.NodeIdentity, "with mTLS, the certificate name (DNS/URI SAN or CN) a node_id must match; {node} stands for the node_id; * accepts any (ALLOT_TLS_NODE_ID)")
	fs.DurationVar(&o.tlsReload, "tls-reload", d.TLS.Reload, "how often the TLS files are read for changes; negative: only on SIGHUP (ALLOT_TLS_RELOAD)")
	fs.StringVar(&o.metricsTLS, "metrics-tls", "", "serve --metrics over TLS with --tls-cert: tls, or mtls to require a client certificate too (ALLOT_METRICS_TLS). Default: plaintext")
	fs.StringVar(&o.tokenFile, "auth-token-file", "", "file of shared tokens, one a line; callers send \"authorization: Bearer <token>\"; needs --tls-cert; reloaded on SIGHUP (ALLOT_AUTH_TOKEN_FILE)")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "file of Admin service tokens, one a line, each optionally after a name and a space (\"alice <token>\"); they admit Admin calls only; needs --tls-cert; reloaded on SIGHUP (ALLOT_ADMIN_TOKEN_FILE). Default: none")
	fs.StringVar(&o.adminIdentities, "admin-identities", "", "comma-separated client certificate names (DNS/URI SAN or CN) admitted to the Admin service; needs --tls-client-ca (ALLOT_ADMIN_IDENTITIES). Default: none; with neither, the Admin service refuses every call")
	fs.DurationVar(&o.overridesPoll, "overrides-poll", d.OverridesPoll, "how often the store's runtime overrides are read for other allocators' changes (ALLOT_OVERRIDES_POLL)")
	fs.StringVar(&o.reflection, "reflection", string(d.Reflection), "who may use server reflection: authenticated, on or off (ALLOT_REFLECTION)")
	fs.StringVar(&o.getRules, "get-rules", string(d.GetRules), "who may call GetRules: authenticated, on or off (ALLOT_GET_RULES)")
	fs.IntVar(&o.maxInFlight, "max-inflight", d.MaxInFlight, "Acquire, Release, Check and ShouldRateLimit calls served at once; more get ResourceExhausted at once; negative: no bound (ALLOT_MAX_INFLIGHT)")
	fs.IntVar(&o.maxPerNode, "max-inflight-per-node", d.MaxInFlightPerNode, "calls in flight from one node_id; negative: no bound (ALLOT_MAX_INFLIGHT_PER_NODE)")
	fs.IntVar(&o.memoryMaxKeys, "memory-max-keys", d.MemoryMaxKeys, "keys the embedded memory store holds at most; a new key past it gets ResourceExhausted (ALLOT_MEMORY_MAX_KEYS)")
	fs.Int64Var(&o.redisMaxKeys, "redis-max-keys", d.RedisMaxKeys, "keys the Redis database holds at most (DBSIZE, polled every 100ms); a new key past it gets ResourceExhausted; negative: no cap (ALLOT_REDIS_MAX_KEYS)")
	fs.Float64Var(&o.newKeysPerNode, "max-new-keys-per-node", d.NewKeysPerNode, "keys one node may add to the store per second; more get ResourceExhausted with a RetryInfo; negative: no cap (ALLOT_MAX_NEW_KEYS_PER_NODE)")
	fs.StringVar(&o.gossipKeyring, "gossip-keyring", "", "file of gossip encryption keys, base64, one a line, the first encrypts; reloaded on SIGHUP (ALLOT_GOSSIP_KEYRING). Default: gossip in the clear")
	fs.StringVar(&o.envoyConfigDir, "envoy-config-dir", "", "directory of envoyproxy/ratelimit config files (its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config), one domain per *.yaml as they are, added to the rules file's envoy section; reloaded on SIGHUP (ALLOT_ENVOY_CONFIG_DIR). Default: none")
	fs.StringVar(&o.envoyListen, "envoy-listen", "", "also serve Envoy's rate limit service (and health) on this gRPC address of its own (ALLOT_ENVOY_LISTEN). Default: on --listen only")
	fs.StringVar(&o.parent, "parent", "", "a parent allocator's gRPC address: rules of scope global are leased from it, and this allocator is a region (ALLOT_PARENT). Default: none, global rules are served as regional ones")
	fs.StringVar(&o.region, "region", "", "this allocator's name at --parent, unique among the allocators under it (a region of two allocators names each: eu-a, eu-b); with mTLS, what its certificate names (ALLOT_REGION)")
	fs.IntVar(&o.regions, "regions", 0, "how many regions share --parent, at least: a region cut off from its parent lends a global key it holds no lease on at limit/regions (it divides by the most the parent told it, if more) (ALLOT_REGIONS). Default: what the parent told it, else 1")
	fs.StringVar(&o.parentTLSCert, "parent-tls-cert", "", "PEM client certificate chain: reach --parent over TLS with it; reloaded as --tls-reload says (ALLOT_PARENT_TLS_CERT). Default: plaintext")
	fs.StringVar(&o.parentTLSKey, "parent-tls-key", "", "PEM private key of --parent-tls-cert (ALLOT_PARENT_TLS_KEY)")
	fs.StringVar(&o.parentTLSCA, "parent-tls-ca", "", "PEM CA bundle the parent's certificate is verified by; alone, the region reaches the parent over TLS without a client certificate (ALLOT_PARENT_TLS_CA). Default: the system's roots")
	fs.StringVar(&o.parentServerName, "parent-tls-server-name", "", "the name the parent's certificate must carry (ALLOT_PARENT_TLS_SERVER_NAME). Default: the host of --parent")
	fs.StringVar(&o.parentToken, "parent-token-file", "", "file whose first token (the --auth-token-file format) is sent to --parent as \"authorization: Bearer <token>\"; needs TLS to the parent (--parent-tls-ca or --parent-tls-cert); reloaded on SIGHUP (ALLOT_PARENT_TOKEN_FILE)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (ALLOT_LOG_LEVEL)")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json (ALLOT_LOG_FORMAT)")
	// The flag package prints a bad flag's error and the whole usage, and
	// returns the error for main to print again: here it prints nothing,
	// main prints the error once, and --help alone prints the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	restore, badValue := explainValues(fs)
	err := envDefaults(fs)
	if err == nil {
		err = fs.Parse(args)
	}
	restore() // PrintDefaults names a flag's type from the flag package's own value
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "Usage: allocator [flags]\n\nAllot's central allocator. Flags:\n")
		fs.PrintDefaults()
		return nil, err
	case err != nil && !*badValue: // an unknown flag, a flag without its value
		return nil, fmt.Errorf("%w (see --help)", err)
	case err != nil:
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	return o, nil
}

// explainValues makes every number, duration and boolean flag's parse
// error say what the flag wants ("want a duration such as 500ms"): the
// flag package's own say "parse error". restore puts the flag package's
// values back; badValue says whether one of them refused its value.
func explainValues(fs *flag.FlagSet) (restore func(), badValue *bool) {
	badValue = new(bool)
	saved := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		if want := wantOf(f.Value); want != "" {
			saved[f] = f.Value
			f.Value = wantValue{Value: f.Value, want: want, failed: badValue}
		}
	})
	return func() {
		for f, v := range saved {
			f.Value = v
		}
	}, badValue
}

// wantOf says what a flag package value parses, for its error.
func wantOf(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 500ms"
	case bool:
		return "want true or false"
	case int, int64:
		return "want a whole number"
	case float64:
		return "want a number such as 2.5"
	}
	return ""
}

// wantValue is a flag value whose parse error is what it wants.
type wantValue struct {
	flag.Value
	want   string
	failed *bool
}

func (v wantValue) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil {
		return nil
	}
	*v.failed = true
	if err.Error() == "parse error" { // the flag package's errParse, which says nothing more
		return errors.New(v.want)
	}
	return fmt.Errorf("%v; %s", err, v.want) // "value out of range; want a whole number"
}

// IsBoolFlag keeps a boolean flag's value optional (--redis-cluster).
func (v wantValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// envDefaults applies ALLOT_<FLAG> variables before the command line, so
// that flags win.
func envDefaults(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "ALLOT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func newLogger(o *options, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", o.logFormat)
}

func run(args []string, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o, stderr)
	if err != nil {
		return err
	}
	reflection, err := allocator.ParseAccess(o.reflection)
	if err != nil {
		return fmt.Errorf("--reflection: %v", err)
	}
	getRules, err := allocator.ParseAccess(o.getRules)
	if err != nil {
		return fmt.Errorf("--get-rules: %v", err)
	}
	if o.maxInFlight == 0 || o.maxPerNode == 0 {
		return errors.New("--max-inflight, --max-inflight-per-node: 0 would refuse every call; give a bound, or a negative number for none")
	}
	if o.memoryMaxKeys < 1 {
		return fmt.Errorf("--memory-max-keys: must be at least 1, got %d", o.memoryMaxKeys)
	}
	if o.redisMaxKeys == 0 || o.newKeysPerNode == 0 || math.IsNaN(o.newKeysPerNode) || math.IsInf(o.newKeysPerNode, 0) {
		return errors.New("--redis-max-keys, --max-new-keys-per-node: 0 would refuse every new key; give a bound, or a negative number for none")
	}
	a, err := allocator.New(allocator.Config{
		Listen: o.listen, RulesFile: o.config, RedisURL: o.redis, RedisCluster: o.redisCluster, MetricsListen: o.metrics,
		StoreTimeout: o.storeTimeout, Logger: log,
		GossipBind: o.gossip, GossipJoin: splitList(o.join), Advertise: o.advertise,
		TLS: allocator.TLSConfig{CertFile: o.tlsCert, KeyFile: o.tlsKey, ClientCAFile: o.tlsClientCA,
			NodeIdentity: o.tlsNodeID, Reload: o.tlsReload},
		MetricsTLS: o.metricsTLS, TokenFile: o.tokenFile, Reflection: reflection, GetRules: getRules,
		MaxInFlight: o.maxInFlight, MaxInFlightPerNode: o.maxPerNode, GossipKeyringFile: o.gossipKeyring,
		EnvoyListen: o.envoyListen, EnvoyConfigDir: o.envoyConfigDir, MemoryMaxKeys: o.memoryMaxKeys, RedisMaxKeys: o.redisMaxKeys,
		NewKeysPerNode: o.newKeysPerNode,
		AdminTokenFile: o.adminTokenFile, AdminIdentities: splitList(o.adminIdentities), OverridesPoll: o.overridesPoll,
		Parent: o.parent, Region: o.region, Regions: o.regions, ParentTokenFile: o.parentToken,
		ParentTLS: allocator.ParentTLSConfig{CertFile: o.parentTLSCert, KeyFile: o.parentTLSKey, CAFile: o.parentTLSCA, ServerName: o.parentServerName},
	})
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	for {
		select {
		case err := <-served:
			a.Stop() // close the store and leave gossip even when serving failed
			return err
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				if o.config != "" || o.envoyConfigDir != "" {
					_ = a.Reload() // logged; the old rules stay
				}
				_ = a.ReloadCredentials() // logged; what fails to load stays as it was
				continue
			}
			log.Info("draining", "signal", sig.String(), "deadline", o.drainTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), o.drainTimeout)
			err := a.Shutdown(ctx)
			cancel()
			<-served
			return err
		}
	}
}
