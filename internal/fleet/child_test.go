package fleet

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/netdelay"
	"github.com/allot-dev/allot/internal/rules"
)

// The test binary doubles as a fleet's far side: run with childEnv set, it
// is the allocator (on the shared Redis) and a delay proxy per node in
// front of it, in a process of their own. The nodes, in the test's
// process, are then all that the test's load shares a Go scheduler with:
// callers that saturate the nodes' CPUs starve the nodes, not the
// allocator nor the network between.
const (
	childEnv        = "ALLOT_FLEET_CHILD" // the rules, in YAML
	childRedisEnv   = "ALLOT_FLEET_REDIS"
	childProxiesEnv = "ALLOT_FLEET_PROXIES" // how many
	childRTTEnv     = "ALLOT_FLEET_RTT"     // each proxy's round trip
	// A region's child (tree_test.go): its parent's address, the round trip
	// of the proxy it reaches the parent through (in the child), its name.
	childParentEnv    = "ALLOT_FLEET_PARENT"
	childParentRTTEnv = "ALLOT_FLEET_PARENT_RTT"
	childRegionEnv    = "ALLOT_FLEET_REGION"
	// childListenEnv is the address the allocator listens on, for one
	// restarted where it was (default: a free port).
	childListenEnv = "ALLOT_FLEET_LISTEN"
	childReady     = "fleet child serving"
)

// serveChild is the child's side: it serves until its stdin closes (the
// test is done with it, or gone).
func serveChild() error {
	set, err := rules.Parse("fleet", []byte(os.Getenv(childEnv)))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv(childProxiesEnv))
	if err != nil {
		return err
	}
	rtt, err := time.ParseDuration(os.Getenv(childRTTEnv))
	if err != nil {
		return err
	}
	cfg := allocator.Config{Rules: set, RedisURL: os.Getenv(childRedisEnv), StoreTimeout: time.Second,
		Listen: os.Getenv(childListenEnv), Logger: slog.New(slog.NewTextHandler(logSink(), nil))}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	var up *netdelay.Proxy // to the parent
	if parent := os.Getenv(childParentEnv); parent != "" {
		prtt, err := time.ParseDuration(os.Getenv(childParentRTTEnv))
		if err != nil {
			return err
		}
		if up, err = netdelay.Start(parent, prtt); err != nil {
			return err
		}
		defer up.Close()
		cfg.Parent, cfg.Region = up.Addr(), os.Getenv(childRegionEnv)
	}
	a, err := allocator.New(cfg)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve() }()
	addrs := []string{a.Addr()}
	var proxies []*netdelay.Proxy
	for range n {
		p, err := netdelay.Start(a.Addr(), rtt)
		if err != nil {
			return err
		}
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	fmt.Println(childReady, strings.Join(addrs, " "))
	// A region's child cuts its link to the parent on a "cut" line and
	// restores it on "restore"; any child stops when its stdin closes.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if up != nil {
			up.Cut(sc.Text() == "cut")
		}
	}
	for _, p := range proxies {
		p.Close()
	}
	a.Stop()
	return <-served
}

// child is a fleet's far side, running.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	alloc   string   // the allocator's address
	proxies []string // one per node
	// yaml and redis are what it was started on, to start it again.
	yaml, redis string
}

// startChild starts the allocator of the rules in yaml and n proxies of
// round trip rtt in front of it; env adds to its environment (a region's
// parent). The caller stops it (stop), once its nodes are closed.
func startChild(t *testing.T, yaml, redisURL string, n int, rtt time.Duration, env ...string) *child {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+yaml, childRedisEnv+"="+redisURL,
		childProxiesEnv+"="+strconv.Itoa(n), childRTTEnv+"="+rtt.String())
	cmd.Env = append(cmd.Env, env...)
	// Should the test die, its children die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, done: make(chan struct{}), yaml: yaml, redis: redisURL}
	ready := make(chan []string, 1)
	var tail []string
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, childReady+" "); ok {
				ready <- strings.Fields(rest)
				continue
			}
			tail = append(tail, line)
		}
		cmd.Wait()
		close(c.done)
	}()
	select {
	case addrs := <-ready:
		if len(addrs) == n+1 {
			c.alloc, c.proxies = addrs[0], addrs[1:]
			return c
		}
		c.stop()
		t.Fatalf("fleet child: %d addresses for %d proxies", len(addrs), n)
	case <-c.done:
		t.Fatalf("fleet child exited at start: %s", strings.Join(tail, "\n"))
	case <-time.After(20 * time.Second):
		c.stop()
		t.Fatal("fleet child not serving within 20s")
	}
	return nil
}

// kill kills the child at once, as a crash does, and waits for it.
func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// stop closes the child's stdin, which stops it, and kills it if it has
// not stopped within five seconds.
func (c *child) stop() {
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}
