// Package lograte keeps a repeated log line from flooding the logs during an
// outage: each message passes a few times, then a few times a minute, and
// the next line that passes says how many were dropped since the last one.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/allot-dev/allot/internal/bucket"
	"github.com/allot-dev/allot/internal/clock"
)

// Default allowance of one message: a burst of 3, then one every 10s.
const (
	DefaultBurst = 3
	DefaultEvery = 10 * time.Second
)

// maxMessages bounds the table of messages; messages are constants of the
// code, so this is a safety net, not a working limit.
const maxMessages = 1024

// Logger rate-limits log lines per message. It is safe for concurrent use.
type Logger struct {
	l     *slog.Logger
	clk   clock.Clock
	burst int64
	every time.Duration

	mu   sync.Mutex
	msgs map[string]*entry
}

type entry struct {
	allow   *bucket.TokenBucket
	dropped int64
}

// New rate-limits lines to l: per message, burst lines at once and then one
// every interval. Zero values take the defaults; a nil clock is the real one.
func New(l *slog.Logger, clk clock.Clock, burst int, every time.Duration) *Logger {
	if burst <= 0 {
		burst = DefaultBurst
	}
	if every <= 0 {
		every = DefaultEvery
	}
	if clk == nil {
		clk = clock.Real()
	}
	return &Logger{l: l, clk: clk, burst: int64(burst), every: every, msgs: make(map[string]*entry)}
}

// Log logs msg at level unless the message has been logged too often; the
// line that passes after drops carries dropped=N.
func (r *Logger) Log(level slog.Level, msg string, args ...any) { r.LogKeyed(msg, level, msg, args...) }

// LogKeyed is Log with the limit kept under key instead of msg: for lines
// whose message varies, keyed by the format that made them.
func (r *Logger) LogKeyed(key string, level slog.Level, msg string, args ...any) {
	if !r.l.Enabled(context.Background(), level) {
		return
	}
	dropped, ok := r.pass(key)
	if !ok {
		return
	}
	if dropped > 0 {
		args = append(args, "dropped", dropped)
	}
	r.l.Log(context.Background(), level, msg, args...)
}

// Warn is Log at warn level.
func (r *Logger) Warn(msg string, args ...any) { r.Log(slog.LevelWarn, msg, args...) }

// Error is Log at error level.
func (r *Logger) Error(msg string, args ...any) { r.Log(slog.LevelError, msg, args...) }

func (r *Logger) pass(key string) (dropped int64, ok bool) {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.msgs[key]
	if e == nil {
		if len(r.msgs) >= maxMessages {
			clear(r.msgs)
		}
		// One token every interval, burst at most: always valid arguments.
		b, _ := bucket.NewTokenBucketPer(r.burst, 1, r.every, now)
		e = &entry{allow: b}
		r.msgs[key] = e
	}
	if !e.allow.Allow(now) {
		e.dropped++
		return 0, false
	}
	dropped, e.dropped = e.dropped, 0
	return dropped, true
}
