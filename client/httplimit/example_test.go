package httplimit_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

// A service limits GET /hello per API key. This node is given its rule
// directly and no allocator, so it decides alone; in production, list the
// allocators in client.Config.Allocators instead.
func Example() {
	c, err := client.New(client.Config{
		Rules:  []client.Rule{{Name: "api-per-key", Algorithm: "token_bucket", Limit: 2, Period: time.Hour}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	mw, err := httplimit.New(c, httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "api-per-key"}},
		KeyHeader: "X-API-Key",
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := mw.Wrap(mux)

	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.Header.Set("X-API-Key", "demo")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, "RateLimit:", rec.Header().Get("RateLimit"))
		if rec.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", rec.Header().Get("Retry-After"))
			fmt.Println("RateLimit-Policy:", rec.Header().Get("RateLimit-Policy"))
			fmt.Println("Content-Type:", rec.Header().Get("Content-Type"))
			fmt.Print(rec.Body.String())
		}
	}
	// Output:
	// 200 RateLimit: "api-per-key";r=1;t=1800
	// 200 RateLimit: "api-per-key";r=0;t=3600
	// 429 RateLimit: "api-per-key";r=0;t=1800
	// Retry-After: 1800
	// RateLimit-Policy: "api-per-key";q=2;w=3600
	// Content-Type: application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota exceeded","status":429,"detail":"The rate limit \"api-per-key\" was exceeded; retry in 1800 seconds.","violated-policies":["api-per-key"]}
}

// Two limits checked together, "2 an hour and 5 a day": a request must
// pass both. RateLimit-Policy lists both, with the quota and window of
// each rule; RateLimit and the refusal name the rule the decision is
// about: the one with the least remaining, or the one that refused.
func ExampleNew_burstAndSustained() {
	c, err := client.New(client.Config{
		Rules: []client.Rule{
			{Name: "hourly", Algorithm: "token_bucket", Limit: 2, Period: time.Hour},
			{Name: "daily", Algorithm: "token_bucket", Limit: 5, Period: 24 * time.Hour},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	mw, err := httplimit.New(c, httplimit.Options{
		Policies: []httplimit.Policy{{Rule: "hourly"}, {Rule: "daily"}},
		// Callers are told apart by their address here: no KeyHeader.
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
		if rec.Code != http.StatusOK {
			fmt.Println(rec.Header().Get("RateLimit-Policy"))
			fmt.Println(strings.Contains(rec.Body.String(), `"violated-policies":["hourly"]`))
		}
	}
	// Output:
	// 200 "hourly";r=1;t=1800
	// 200 "hourly";r=0;t=3600
	// 429 "hourly";r=0;t=1800
	// "hourly";q=2;w=3600, "daily";q=5;w=86400
	// true
}
