package chaos

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// The test binary doubles as the allocator: run with childEnv set, it
// serves as one, so that the suite can SIGKILL and SIGSTOP a real process.
const (
	childEnv      = "ALLOT_CHAOS_ALLOCATOR" // the gRPC address to listen on
	childRedisEnv = "ALLOT_CHAOS_REDIS"
	childRulesEnv = "ALLOT_CHAOS_RULES" // a rules file
	childReady    = "chaos allocator serving"
)

func TestMain(m *testing.M) {
	if listen := os.Getenv(childEnv); listen != "" {
		if err := serveAllocator(listen); err != nil {
			fmt.Fprintln(os.Stderr, "chaos allocator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveAllocator is the child's side: an allocator as cmd/allocator wires
// it, with its default store timeout (100ms), until it is killed.
func serveAllocator(listen string) error {
	set, err := rules.Load(os.Getenv(childRulesEnv))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := allocator.New(allocator.Config{Listen: listen, RedisURL: os.Getenv(childRedisEnv), Rules: set,
		StoreTimeout: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	fmt.Println(childReady, a.Addr())
	return a.Serve()
}

// allocProc is an allocator child process on a fixed address, so that it
// can be restarted where the nodes look for it. Every process it starts is
// stopped by PID when the test ends.
type allocProc struct {
	t        testing.TB
	addr     string
	redisURL string
	rules    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	tail []string // the last lines it wrote
}

func startAllocator(t testing.TB, addr, redisURL, rulesFile string) *allocProc {
	t.Helper()
	p := &allocProc{t: t, addr: addr, redisURL: redisURL, rules: rulesFile}
	t.Cleanup(p.kill)
	p.start()
	return p
}

// start launches the process and waits until it listens. The address of
// a process just killed may be taken for a moment: it tries again.
func (p *allocProc) start() {
	p.t.Helper()
	var err error
	for range 50 {
		if err = p.launch(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("allocator on %s: %v", p.addr, err)
}

func (p *allocProc) launch() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+p.addr, childRedisEnv+"="+p.redisURL, childRulesEnv+"="+p.rules)
	// Should the suite die, its allocators die with it, stopped or not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready, done := make(chan struct{}), make(chan struct{})
	go p.read(out, ready, done, cmd)
	select {
	case <-ready:
		p.mu.Lock()
		p.cmd, p.done = cmd, done
		p.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("exited at start:\n%s", p.lastLines())
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("not serving within 20s:\n%s", p.lastLines())
	}
}

func (p *allocProc) read(out io.Reader, ready, done chan struct{}, cmd *exec.Cmd) {
	sc := bufio.NewScanner(out)
	signalled := false
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if p.tail = append(p.tail, line); len(p.tail) > 20 {
			p.tail = p.tail[1:]
		}
		p.mu.Unlock()
		if os.Getenv("CHAOS_LOG") != "" {
			fmt.Fprintf(os.Stderr, "allocator %s: %s\n", p.addr, line)
		}
		if !signalled && strings.HasPrefix(line, childReady) {
			signalled = true
			close(ready)
		}
	}
	_ = cmd.Wait()
	close(done)
}

func (p *allocProc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill sends SIGKILL, as a crash, and waits for the process to go.
func (p *allocProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill() // a stopped process dies too
	<-done
}

// signal sends sig (SIGSTOP: hung with its sockets open; SIGCONT) to the
// running process.
func (p *allocProc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		p.t.Fatalf("allocator on %s: %v to a process that is not running", p.addr, sig)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("allocator on %s, pid %d: %v: %v", p.addr, cmd.Process.Pid, sig, err)
	}
}
