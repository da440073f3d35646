package readme_test

import (
	"io"
	"net/http"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

// The README's complete httplimit service, as compiled code (the check in
// readme_test.go finds it here): a function never run, for go test to
// compile and go vet to check.
func readmeHTTPService() error {
	c, err := client.New(client.Config{
		Allocators: []string{"127.0.0.1:7070"},
		NodeID:     "web-17",
	})
	if err != nil {
		return err
	}
	defer c.Close()

	limit, err := httplimit.New(c, httplimit.Options{
		Policies:  []httplimit.Policy{{Rule: "api-per-key"}},
		KeyHeader: "X-API-Key",
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /hello", limit.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	return http.ListenAndServe("127.0.0.1:8080", mux)
}

var _ = readmeHTTPService
