package redistest

import (
	"syscall"
	"testing"
)

// Pause stops the server with SIGSTOP: its sockets stay open and connects
// still succeed, but nothing is answered, as with a hung Redis. Resume is
// registered in t.Cleanup (and runs before the Kill of Start), so no process
// is left stopped.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		t.Fatalf("redistest: Pause: server on port %d is not running", s.Port)
	}
	t.Cleanup(s.Resume)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: SIGSTOP pid %d: %v", cmd.Process.Pid, err)
	}
}

// Resume continues a paused server with SIGCONT; it does nothing to a server
// that is not running.
func (s *Server) Resume() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
}
