package bucket

import (
	"fmt"
	"time"
)

// FixedWindow admits up to limit tokens per window, counting from zero again
// at each window start. Windows are aligned to multiples of the window length
// since the Unix epoch, so every node agrees on where a window begins.
//
// It is one counter and cheap, and its known weakness is the boundary: a
// client may spend the limit at the end of one window and again at the start
// of the next, twice the limit within moments. SlidingWindow and SlidingLog
// do not have it.
//
// A FixedWindow is safe for concurrent use.
type FixedWindow struct {
	guard
	limit  int64
	window int64 // nanoseconds
	start  int64 // the current window's start, Unix ns, a multiple of window
	count  int64 // tokens admitted in the current window
}

// NewFixedWindow returns a window counter of limit tokens per window,
// starting empty in the window that holds now.
func NewFixedWindow(limit int64, window time.Duration, now time.Time) (*FixedWindow, error) {
	if err := checkWindow("fixed window", limit, window); err != nil {
		return nil, err
	}
	w := &FixedWindow{limit: limit, window: int64(window)}
	w.start = alignDown(now.UnixNano(), w.window)
	w.order = nextOrder()
	return w, nil
}

// checkWindow validates the parameters that all window algorithms share.
func checkWindow(algorithm string, limit int64, window time.Duration) error {
	if limit <= 0 {
		return fmt.Errorf("bucket: %s: limit must be positive, got %d", algorithm, limit)
	}
	if window <= 0 {
		return fmt.Errorf("bucket: %s: window must be positive, got %v", algorithm, window)
	}
	return nil
}

// alignDown returns the start of the epoch-aligned window holding t,
// rounding towards the past for instants before 1970 too.
func alignDown(t, window int64) int64 {
	s := t - t%window
	if t%window < 0 {
		s -= window
	}
	return s
}

// Allow is AllowN(now, 1) reduced to its answer.
func (w *FixedWindow) Allow(now time.Time) bool {
	d, _ := w.AllowN(now, 1)
	return d.Allowed
}

// AllowN admits n tokens if the current window has room for them.
func (w *FixedWindow) AllowN(now time.Time, n int64) (Decision, error) {
	return decide(w, now, n)
}

// peekLocked decides as if the request were spent when allowed. An instant
// before the current window counts against the current window: moving back
// to an older one would hand out that window's limit a second time.
func (w *FixedWindow) peekLocked(now time.Time, n int64) Decision {
	t := now.UnixNano()
	if s := alignDown(t, w.window); s > w.start {
		w.start, w.count = s, 0
	}
	// The window ends at start+window; measured from t without forming that
	// sum, which could overflow for a window near the largest Duration.
	reset := addDurations(behind(w.start, t), time.Duration(w.window-max(0, t-w.start)))
	d := Decision{Limit: w.limit, Remaining: w.limit - w.count, ResetAfter: reset}
	if n <= d.Remaining {
		d.Allowed = true
		d.Remaining -= n
		return d
	}
	// Every cost up to the limit fits in the next window.
	d.RetryAfter = reset
	return d
}

func (w *FixedWindow) spendLocked(n int64) {
	w.count += n
}

func (w *FixedWindow) ceiling() int64 { return w.limit }
