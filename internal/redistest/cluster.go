package redistest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of dedicated redis-server processes, masters
// only, owned by one test.
type Cluster struct {
	Nodes []*Server
}

// Addrs are the nodes' host:port, the seeds of a cluster client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL is a redis:// URL naming every node, the form of
// redis.ParseClusterURL: "redis://h1:p1?addr=h2:p2&addr=h3:p3".
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// clusterTimeout bounds the creation of a cluster.
const clusterTimeout = 20 * time.Second

// StartCluster starts masters (at least 3) cluster-enabled redis-server
// processes, joins them with `redis-cli --cluster create`, waits until every
// node reports cluster_state:ok, and kills every process by its PID when the
// test ends. Without redis-cli the test is skipped, or fails when
// ALLOT_REQUIRE_REDIS is set.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	binary(t)
	cli := cliBinary(t)
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	c := &Cluster{}
	for range masters {
		c.Nodes = append(c.Nodes, startClusterNode(t))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitOK(ctx, t, cli)
	return c
}

func cliBinary(t testing.TB) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("redistest: redis-cli not found and %s is set", EnvRequire)
		}
		t.Skip("redistest: redis-cli not on PATH; it comes with redis-server (apt-get install -y redis-server)")
	}
	return cli
}

// startClusterNode starts one node with its cluster bus on a port of its own
// (the default, port+10000, may not exist for a high port).
func startClusterNode(t testing.TB) *Server {
	t.Helper()
	var err error
	for range 5 {
		var bus int
		if bus, err = freePort(); err != nil {
			continue
		}
		var s *Server
		s, err = start(t.TempDir(), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000")
		if err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: cluster node: %v", err)
	return nil
}

// waitOK polls CLUSTER INFO on every node until each sees every slot served.
func (c *Cluster) waitOK(ctx context.Context, t testing.TB, cli string) {
	t.Helper()
	for _, s := range c.Nodes {
		for {
			out, err := exec.CommandContext(ctx, cli, "-p", strconv.Itoa(s.Port), "cluster", "info").Output()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: node %s not cluster_state:ok within %v: %v\n%s", s.Addr(), clusterTimeout, err, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
