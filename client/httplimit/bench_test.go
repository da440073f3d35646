package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/allot-dev/allot/client/httplimit"
)

// The middleware's cost per request on one hot key: key extraction, the
// SDK's local decision, the rule's look-up and the two RateLimit fields.
// While the key's leases grow some requests are refused, which costs more
// (a problem+json body); refused/op reports how many.
func BenchmarkWrapLeased(b *testing.B) {
	c := startAllocator(b)
	mw, err := httplimit.New(c, httplimit.Options{
		Policies: []httplimit.Policy{{Rule: "plenty"}}, KeyHeader: "X-API-Key", Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-API-Key", "bench")
	refused := 0
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			refused++
		}
	}
	b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
}
