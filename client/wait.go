package client

import (
	"context"
	"sync"
	"time"
)

// Wait blocks until one request for key under rule may proceed, or ctx
// ends: the leaky-bucket shaping mode. Callers queue in order, at most
// MaxWaiters per key; a caller beyond that gets ErrQueueFull at once.
func (c *Client) Wait(ctx context.Context, rule, key string) error {
	return c.WaitN(ctx, rule, key, 1)
}

// WaitN is Wait for a request that costs n tokens.
func (c *Client) WaitN(ctx context.Context, rule, key string, n int64) error {
	rs, _, err := c.state(rule, key, n)
	if err != nil {
		return err
	}
	q, leave := rs.waits.join(key, c.cfg.MaxWaiters)
	if q == nil {
		return ErrQueueFull
	}
	defer leave()
	// One caller at a time asks; the rest wait their turn in arrival order
	// (a channel's waiting senders are served first in, first out).
	select {
	case q.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-q.turn }()
	for {
		d, err := c.AllowN(ctx, rule, key, n)
		if err != nil || d.Allowed {
			return err
		}
		t := c.cfg.clock.NewTimer(min(max(d.RetryAfter, time.Millisecond), time.Second))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// waitQueues holds the wait queue of each key that has callers waiting.
type waitQueues struct {
	mu sync.Mutex
	m  map[string]*waitQueue
}

type waitQueue struct {
	turn    chan struct{} // holds a token while one caller has the turn
	waiters int
}

// join adds a caller to key's queue; nil when the queue is full. leave
// must be called once the caller is done.
func (w *waitQueues) join(key string, limit int) (*waitQueue, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]*waitQueue)
	}
	q := w.m[key]
	if q == nil {
		q = &waitQueue{turn: make(chan struct{}, 1)}
		w.m[key] = q
	}
	if q.waiters >= limit {
		return nil, nil
	}
	q.waiters++
	return q, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if q.waiters--; q.waiters == 0 {
			delete(w.m, key)
		}
	}
}
