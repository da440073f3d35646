package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-dev/allot/internal/allocator"
	"github.com/allot-dev/allot/internal/rules"
)

// proc is a child process the bench started and stops by PID.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill stops the process with SIGKILL and waits for it.
func (p *proc) kill() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// cpuSeconds is the user+system CPU time the process has used so far.
func (p *proc) cpuSeconds() float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at ")".
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks; Linux reports 100 a second
}

// start runs a command until it prints ready on stdout or stderr.
func start(ready string, within time.Duration, name string, args ...string) (*proc, error) {
	return startCmd(exec.Command(name, args...), ready, within)
}

// startCmd starts cmd and waits until it prints ready on stdout or stderr.
func startCmd(cmd *exec.Cmd, ready string, within time.Duration) (*proc, error) {
	name := filepath.Base(cmd.Path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	seen := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if log.Len() < 4096 {
				log.WriteString(sc.Text() + "\n")
			}
			if !found && strings.Contains(sc.Text(), ready) {
				found = true
				close(seen)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case <-seen:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited at start:\n%s", name, log.String())
	case <-time.After(within):
		p.kill()
		return nil, fmt.Errorf("%s not ready within %v", name, within)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis runs a throwaway redis-server on a free loopback port.
func startRedis(dir string) (*proc, string, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, "", errors.New("redis-server is not installed (apt-get install -y redis-server), or pass --redis")
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := start("Ready to accept connections", 10*time.Second, "redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, "", err
	}
	return p, fmt.Sprintf("redis://127.0.0.1:%d/0", port), nil
}

// allocatorFlag makes the bench binary serve as an allocator: the bench
// starts its allocators as processes of their own, so that their CPU can be
// measured and they can be killed like real ones.
const allocatorFlag = "--serve-allocator"

// startAllocator runs this binary as an allocator on listen.
func startAllocator(listen, redisURL, rulesFile string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return start("allocator serving", 20*time.Second, self, allocatorFlag, listen, redisURL, rulesFile)
}

// serveAllocator is the child's side of startAllocator.
func serveAllocator(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: bench %s LISTEN REDIS_URL RULES_FILE", allocatorFlag)
	}
	set, err := rules.Load(args[2])
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := allocator.New(allocator.Config{Listen: args[0], RedisURL: args[1], Rules: set,
		StoreTimeout: 500 * time.Millisecond, Logger: log})
	if err != nil {
		return err
	}
	fmt.Println("allocator serving on", a.Addr())
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	return a.Serve()
}
