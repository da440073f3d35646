// Package redistest gives tests a real redis-server: the shared one that
// `make test` starts (ALLOT_TEST_REDIS), or dedicated processes that a test
// may kill, restart or join into a cluster. It never mocks Redis.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvURL names the variable that carries the shared test server's URL.
const EnvURL = "ALLOT_TEST_REDIS"

// EnvRequire, when set, turns a missing redis-server into a failure instead
// of a skip, so that CI cannot pass by skipping.
const EnvRequire = "ALLOT_REQUIRE_REDIS"

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// URL returns the redis:// URL of a server shared by the tests of this
// binary: ALLOT_TEST_REDIS when set, else one started for the binary and
// left to die with it. Tests that share it must use their own rule names.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	binary(t)
	sharedOnce.Do(func() { shared, sharedErr = start("") })
	if sharedErr != nil {
		t.Fatalf("redistest: %v", sharedErr)
	}
	return shared.URL()
}

// Server is a redis-server process owned by one test.
type Server struct {
	Port int
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start launches a dedicated redis-server on a free loopback port and stops
// it when the test ends. Extra arguments are passed to redis-server.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	binary(t)
	s, err := start(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the process with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the server again on the same port, with an empty data set
// (no persistence), as after a crash of a cache-only Redis.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var err error
	for i := 0; i < 50; i++ { // the port can linger for a moment after a kill
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: restart on port %d: %v", s.Port, err)
}

func binary(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("redistest: redis-server not found and %s is set", EnvRequire)
		}
		t.Skip("redistest: redis-server not on PATH; `make test` installs and starts it")
	}
}

func start(dir string, args ...string) (*Server, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "allot-redis-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	var err error
	for i := 0; i < 5; i++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		s := &Server{Port: port, dir: dir, args: args}
		if err = s.launch(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func (s *Server) launch() error {
	argv := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
	}
	argv = append(argv, s.args...)
	cmd := exec.Command("redis-server", argv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if log.Len() < 8<<10 {
				log.WriteString(line + "\n")
			}
			if !signalled && strings.Contains(line, "Ready to accept connections") {
				close(ready)
				signalled = true
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server on port %d exited at start:\n%s", s.Port, log.String())
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on port %d not ready within 10s", s.Port)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
