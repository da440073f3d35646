package idempotency

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
)

// fleet is n instances of one service: each an HTTP server with its own
// middleware and its own go-redis client, all sharing one Redis.
type fleet struct {
	urls []string
}

func newFleet(t *testing.T, redisURL string, n int, opts Options, h http.Handler) *fleet {
	t.Helper()
	f := &fleet{}
	for range n {
		o, err := redis.ParseURL(redisURL)
		if err != nil {
			t.Fatal(err)
		}
		o.MaxRetries = -1 // a dead Redis is an error at once, not after backoffs
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		opts := opts
		opts.Redis = c
		if opts.Logger == nil {
			opts.Logger = quiet
		}
		m, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(m.Wrap(h))
		t.Cleanup(srv.Close)
		f.urls = append(f.urls, srv.URL)
	}
	return f
}

// answer is what one client got.
type answer struct {
	status   int
	replayed bool
	body     string
}

// post sends body with key to instance i, which is any of them, i mod n.
func (f *fleet) post(t *testing.T, i int, key, body string) answer {
	req, err := http.NewRequest("POST", f.urls[i%len(f.urls)]+"/orders", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, replayed: res.Header.Get(HeaderReplayed) == "true", body: string(b)}
}

// postAll sends n requests at once, request j to instance j mod the fleet.
func (f *fleet) postAll(t *testing.T, n int, key func(j int) string, body string) []answer {
	out := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for j := range n {
		wg.Go(func() {
			<-start
			out[j] = f.post(t, j, key(j), body)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// Issue 21's must-show: 50 concurrent requests with one key against 4
// instances sharing a Redis run the handler once; the 49 others get the
// replay or 409, and the same key with another body gets 422.
func TestFleetRunsOnce(t *testing.T) {
	svc := &service{work: 5 * time.Millisecond}
	f := newFleet(t, redistest.URL(t), 4, Options{}, svc)
	// The handler works for a moment, so that duplicates arrive while it
	// runs (409) and after (replays); any mix of the two passes.
	key := newToken()
	var made, replays, conflicts int
	for _, a := range f.postAll(t, 50, func(int) string { return key }, "an order") {
		switch {
		case a.status == 201 && !a.replayed:
			made++
		case a.status == 201 && a.body == "made an order":
			replays++
		case a.status == 409 && strings.Contains(a.body, "still being processed"):
			conflicts++
		default:
			t.Errorf("unexpected answer %+v", a)
		}
	}
	t.Logf("50 requests, one key, 4 instances: handler ran %d time(s); %d original, %d replays, %d 409s",
		svc.runs.Load(), made, replays, conflicts)
	wantRuns(t, svc, 1)
	if made != 1 || replays+conflicts != 49 {
		t.Errorf("%d originals, %d replays, %d 409s; want 1 and 49 replays or 409s", made, replays, conflicts)
	}
	// Every instance now replays it.
	for i := range 4 {
		if a := f.post(t, i, key, "an order"); a.status != 201 || !a.replayed {
			t.Errorf("instance %d: %+v, want the replay", i, a)
		}
	}
	if a := f.post(t, 1, key, "another order"); a.status != 422 {
		t.Errorf("same key, another body: %+v, want 422", a)
	}
	wantRuns(t, svc, 1)
}

// Redis killed while handlers run: none runs twice, and every client after
// the kill gets a 503 that says the store is down (fail closed).
func TestFleetRedisKilledMidRun(t *testing.T) {
	srv := redistest.Start(t) // this test's own: it is killed
	gate := make(chan struct{})
	runs := map[string]int{}
	var mu sync.Mutex
	running := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs)
	}
	f := newFleet(t, srv.URL(), 4, Options{StoreTimeout: time.Second}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		runs[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		<-gate
		w.WriteHeader(201)
	}))

	const keys, copies = 10, 5
	key := func(j int) string { return "order-" + string(rune('a'+j%keys)) }
	answers := make(chan []answer)
	go func() { answers <- f.postAll(t, keys*copies, key, "x") }()
	waitFor(t, "a run of every key", func() bool { return running() == keys })
	srv.Kill()
	close(gate)
	count := map[int]int{}
	for _, a := range <-answers {
		count[a.status]++
	}
	// After the kill every retry, of every key, on every instance, is refused.
	retries := f.postAll(t, keys*copies, key, "x")
	for _, a := range retries {
		if a.status != 503 || !strings.Contains(a.body, "store of Idempotency-Key values is unavailable") {
			t.Errorf("a retry with Redis down: %+v, want 503 saying the store is down", a)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range runs {
		if n != 1 {
			t.Errorf("key %s ran %d times", k, n)
		}
	}
	t.Logf("Redis killed with %d handlers running: the first %d requests got %v (status: count); %d retries got 503; runs per key: %v",
		keys, keys*copies, count, len(retries), runs)
	if len(runs) != keys {
		t.Errorf("%d keys ran, want %d", len(runs), keys)
	}
}
