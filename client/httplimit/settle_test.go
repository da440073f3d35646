package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/allot-dev/allot/client/httplimit"
)

// The handler reports what a request cost in a header, a trailer or by
// ReportCost; the middleware settles it once the handler returns, and the
// next request pays for it.
func TestSettleFromTheHandler(t *testing.T) {
	c := startAllocator(t)
	for _, tc := range []struct {
		name   string
		opts   httplimit.Options
		report func(w http.ResponseWriter, r *http.Request, n int64)
	}{
		{"header", httplimit.Options{SettleHeader: "X-Tokens-Used"}, func(w http.ResponseWriter, _ *http.Request, n int64) {
			w.Header().Set("X-Tokens-Used", strconv.FormatInt(n, 10))
			w.WriteHeader(http.StatusOK)
		}},
		{"trailer", httplimit.Options{SettleHeader: "X-Tokens-Used"}, func(w http.ResponseWriter, _ *http.Request, n int64) {
			w.Header().Set("Trailer", "X-Tokens-Used")
			_, _ = w.Write([]byte("streamed"))
			w.Header().Set("X-Tokens-Used", strconv.FormatInt(n, 10))
		}},
		{"callback", httplimit.Options{SettleCallback: true}, func(w http.ResponseWriter, r *http.Request, n int64) {
			if !httplimit.ReportCost(r.Context(), n) {
				t.Error("ReportCost found no request to report for")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A log of 2 a day, decided by the allocator: each count is exact.
			tc.opts.Policies = []httplimit.Policy{{Rule: "login"}}
			tc.opts.KeyHeader = "X-API-Key"
			mw, err := httplimit.New(c, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cost := int64(2)
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.report(w, r, cost) }))
			get := func() int {
				req := httptest.NewRequest("GET", "/", nil)
				req.Header.Set("X-API-Key", tc.name)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			if code := get(); code != http.StatusOK {
				t.Fatalf("first request: %d", code)
			}
			// Admitted on an estimate of 1, it cost 2: the day's 2 are spent.
			if code := get(); code != http.StatusTooManyRequests {
				t.Fatalf("after a request that cost the whole limit: %d, want 429", code)
			}
		})
	}
}

// A cost of 0 exempts a request from settling as from the limit; an
// unreadable report charges the estimate; settling takes one policy.
func TestSettleExemptAndBadReports(t *testing.T) {
	c := startAllocator(t)
	mw, err := httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}}, KeyHeader: "X-API-Key",
		SettleHeader: "X-Tokens-Used",
		Cost: func(r *http.Request) int64 {
			if r.URL.Path == "/healthz" {
				return 0
			}
			return 1
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", r.URL.Query().Get("used"))
	}))
	get := func(path string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 3 {
		if code := get("/healthz?used=100"); code != http.StatusOK {
			t.Fatalf("an exempt request: %d", code)
		}
	}
	if code := get("/?used=lots"); code != http.StatusOK { // charged its estimate, 1
		t.Fatalf("first request: %d", code)
	}
	if code := get("/?used=1"); code != http.StatusOK {
		t.Fatalf("second request: %d, want 200: the exempt ones and the bad report charged 1 in all", code)
	}
	if code := get("/?used=1"); code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", code)
	}
	if _, err := httplimit.New(c, httplimit.Options{Policies: []httplimit.Policy{{Rule: "login"}, {Rule: "hourly"}}, SettleCallback: true}); err == nil {
		t.Fatal("settling over two policies was accepted")
	}
}
