package fallback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Roles a gossip member may have. Only nodes divide the limits; allocators
// join the same pool so that nodes can find them.
const (
	RoleNode      = "node"
	RoleAllocator = "allocator"
)

// DefaultBind is GossipConfig.Bind's default: a free port on loopback, so
// that a member nobody placed, gossiping in the clear until it is given
// Keys, is heard by no other host. A pool across hosts binds an address
// its peers can reach, and a port they know.
const DefaultBind = "127.0.0.1:0"

// GossipConfig joins a memberlist pool.
type GossipConfig struct {
	// Name is this member's unique name, usually the node id. Required.
	Name string
	// Role is RoleNode or RoleAllocator. default: RoleNode
	Role string
	// Bind is the gossip address, host:port; port 0 picks a free one.
	// default: DefaultBind
	Bind string
	// Join lists members to contact at start; empty starts a new pool.
	Join []string
	// GRPC is the address an allocator serves on, advertised to nodes.
	GRPC string
	// Fast shortens probe and gossip intervals for a loopback test pool:
	// a dead member is noticed in about a second instead of about five.
	Fast bool
	// Keys encrypt and authenticate every gossip message (AES-GCM): a
	// member without one of them can neither join nor be heard, so it
	// cannot pose as a node or an allocator. Keys[0] encrypts; the others
	// are accepted too, for a rotation (see SetKeys). Each is 16, 24 or 32
	// bytes. default: none, gossip in the clear
	Keys [][]byte
	// TrustAllocators, when set, lists patterns (path.Match syntax, e.g.
	// "10.0.3.*:7070") that an allocator's advertised address must match
	// for Allocators to list it. default: every allocator in the pool
	TrustAllocators []string
	// Logger. default: slog.Default(), at debug level
	Logger *slog.Logger
}

// Gossip is a live membership: it counts the nodes that share the limits.
type Gossip struct {
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil without Keys
	trust   []string
	nodes   atomic.Int32
	mu      sync.Mutex
	roles   map[string]memberInfo
}

type memberInfo struct{ role, grpc string }

// Join starts gossiping and joins the pool.
func Join(cfg GossipConfig) (*Gossip, error) {
	if cfg.Name == "" {
		return nil, errors.New("fallback: gossip: Name is required")
	}
	if cfg.Role == "" {
		cfg.Role = RoleNode
	}
	if cfg.Role != RoleNode && cfg.Role != RoleAllocator {
		return nil, fmt.Errorf("fallback: gossip: Role %q: want %q or %q", cfg.Role, RoleNode, RoleAllocator)
	}
	if err := checkPatterns(cfg.TrustAllocators); err != nil {
		return nil, err
	}
	mc, err := memberlistConfig(cfg)
	if err != nil {
		return nil, err
	}
	g := &Gossip{roles: make(map[string]memberInfo), trust: cfg.TrustAllocators}
	if len(cfg.Keys) > 0 {
		if g.keyring, err = newKeyring(cfg.Keys); err != nil {
			return nil, err
		}
		// Verify both ways (memberlist's default, kept explicit): a message
		// that is not encrypted with a key of the ring is dropped.
		mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = g.keyring, true, true
	}
	meta := encodeMeta(memberInfo{role: cfg.Role, grpc: cfg.GRPC})
	mc.Delegate = metaDelegate(meta)
	mc.Events = (*events)(g)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("fallback: gossip: %w", err)
	}
	g.ml = ml
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil {
			ml.Shutdown()
			return nil, fmt.Errorf("fallback: gossip: join %v: %w", cfg.Join, err)
		}
	}
	return g, nil
}

func memberlistConfig(cfg GossipConfig) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	if cfg.Fast {
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 250 * time.Millisecond // a dead member is suspected within ~2 probes
		mc.ProbeTimeout = 150 * time.Millisecond  // loopback answers in microseconds, even on a busy CI box
		mc.SuspicionMult = 3                      // and declared dead about a second later
		mc.GossipInterval = 50 * time.Millisecond // news spreads within a few rounds
		mc.PushPullInterval = time.Second         // and a full sync repairs what a busy box dropped
	}
	mc.Name = cfg.Name
	bind := cfg.Bind
	if bind == "" {
		bind = DefaultBind
	}
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return nil, fmt.Errorf("fallback: gossip: Bind %q: %w", bind, err)
	}
	if mc.BindPort, err = strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("fallback: gossip: Bind %q: bad port", bind)
	}
	// Advertise the bound address only when it is a specific IP: for
	// 0.0.0.0 or a host name, memberlist picks this host's private address,
	// which is what peers can reach.
	mc.BindAddr = host
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if ip == nil {
			addrs, err := net.LookupIP(host)
			if err != nil || len(addrs) == 0 {
				return nil, fmt.Errorf("fallback: gossip: Bind %q: cannot resolve %q", bind, host)
			}
			mc.BindAddr = addrs[0].String()
		}
	} else {
		mc.AdvertiseAddr, mc.AdvertisePort = host, mc.BindPort
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	mc.Logger = log.New(slogWriter{logger}, "", 0)
	return mc, nil
}

// Addr is the address other members join.
func (g *Gossip) Addr() string {
	n := g.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Nodes counts live members with the node role. It takes no lock.
func (g *Gossip) Nodes() int { return int(g.nodes.Load()) }

// Allocators lists the gRPC addresses advertised by live allocators that
// TrustAllocators admits.
func (g *Gossip) Allocators() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, m := range g.roles {
		if m.role == RoleAllocator && m.grpc != "" && trusted(g.trust, m.grpc) {
			out = append(out, m.grpc)
		}
	}
	sort.Strings(out)
	return out
}

// Leave tells the pool this member is going and stops gossiping.
func (g *Gossip) Leave(timeout time.Duration) error {
	err := g.ml.Leave(timeout)
	if e := g.ml.Shutdown(); err == nil {
		err = e
	}
	return err
}

// Stop stops gossiping without a word: to the others it looks like a crash.
func (g *Gossip) Stop() error { return g.ml.Shutdown() }

func encodeMeta(m memberInfo) []byte { return []byte("role=" + m.role + ";grpc=" + m.grpc) }

func decodeMeta(b []byte) memberInfo {
	var m memberInfo
	for _, part := range strings.Split(string(b), ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "role":
			m.role = v
		case "grpc":
			m.grpc = v
		}
	}
	return m
}

// events keeps the role of every live member, so Nodes is a load.
type events Gossip

func (e *events) set(n *memberlist.Node, alive bool) {
	g := (*Gossip)(e)
	g.mu.Lock()
	defer g.mu.Unlock()
	if alive {
		g.roles[n.Name] = decodeMeta(n.Meta)
	} else {
		delete(g.roles, n.Name)
	}
	count := 0
	for _, m := range g.roles {
		if m.role == RoleNode {
			count++
		}
	}
	g.nodes.Store(int32(count))
}

func (e *events) NotifyJoin(n *memberlist.Node)   { e.set(n, true) }
func (e *events) NotifyLeave(n *memberlist.Node)  { e.set(n, false) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.set(n, true) }

// metaDelegate advertises this member's role and address.
type metaDelegate []byte

func (d metaDelegate) NodeMeta(limit int) []byte {
	if len(d) > limit {
		return d[:limit]
	}
	return d
}
func (metaDelegate) NotifyMsg([]byte)                {}
func (metaDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (metaDelegate) LocalState(bool) []byte          { return nil }
func (metaDelegate) MergeRemoteState([]byte, bool)   {}

// slogWriter sends memberlist's log lines to slog at debug level; its
// [WARN] and [ERR] lines keep their level.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelDebug
	switch {
	case strings.Contains(line, "[ERR]"):
		level = slog.LevelError
	case strings.Contains(line, "[WARN]"):
		level = slog.LevelWarn
	}
	w.l.Log(context.Background(), level, "memberlist: "+line)
	return len(p), nil
}

var _ io.Writer = slogWriter{}
