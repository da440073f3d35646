// Command service is a small HTTP service limited by Allot: GET /hello
// answers each API key (the X-API-Key header; the client's IP without one)
// as often as the allocator's "api-per-key" rule allows, and GET /healthz
// is never limited. With --metrics, the SDK's Prometheus metrics are on
// that address at /metrics.
//
//	go run ./cmd/allocator                # in one terminal
//	go run ./examples/service             # in another
//	curl -i -H 'X-API-Key: demo' localhost:8080/hello
//
// Flags may also be set by environment variables, named beside each flag;
// a flag wins over its variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

type options struct {
	listen     string
	allocators []string
	rule       string
	keyHeader  string
	trustProxy bool
	nodeID     string
	metrics    string // the /metrics address; "" for none
	// Dialing the allocators over TLS (tls.go).
	ca, cert, key, serverName, tokenFile string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

// env names the variable that sets each flag.
var env = map[string]string{
	"listen":      "SERVICE_LISTEN",
	"allocators":  "ALLOT_ALLOCATORS",
	"rule":        "SERVICE_RULE",
	"key-header":  "SERVICE_KEY_HEADER",
	"trust-proxy": "SERVICE_TRUST_PROXY",
	"node-id":     "ALLOT_NODE_ID",
	"metrics":     "SERVICE_METRICS",
	"ca":          "ALLOT_CA",
	"cert":        "ALLOT_CERT",
	"key":         "ALLOT_KEY",
	"server-name": "ALLOT_SERVER_NAME",
	"token-file":  "ALLOT_TOKEN_FILE",
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	var allocators string
	fs := flag.NewFlagSet("service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address (SERVICE_LISTEN)")
	fs.StringVar(&allocators, "allocators", "127.0.0.1:7070", "allocator gRPC addresses, comma-separated (ALLOT_ALLOCATORS)")
	fs.StringVar(&o.rule, "rule", "api-per-key", "the Allot rule that limits GET /hello (SERVICE_RULE)")
	fs.StringVar(&o.keyHeader, "key-header", "X-API-Key", "request header holding the API key (SERVICE_KEY_HEADER)")
	fs.BoolVar(&o.trustProxy, "trust-proxy", false, "take the client IP from X-Forwarded-For; only behind one reverse proxy of yours (SERVICE_TRUST_PROXY)")
	fs.StringVar(&o.nodeID, "node-id", "", "this node's id; with mTLS, the name its certificate carries (ALLOT_NODE_ID). Default: host-pid-random")
	fs.StringVar(&o.metrics, "metrics", "", "HTTP address of the SDK's Prometheus /metrics (SERVICE_METRICS). Default: none")
	fs.StringVar(&o.ca, "ca", "", "PEM CA bundle to verify the allocators by: dial them over TLS (ALLOT_CA). Default: plaintext")
	fs.StringVar(&o.cert, "cert", "", "PEM client certificate for mTLS, reloaded when it changes (ALLOT_CERT)")
	fs.StringVar(&o.key, "key", "", "PEM key of --cert (ALLOT_KEY)")
	fs.StringVar(&o.serverName, "server-name", "", "name every allocator's certificate must carry. Default: the host of each address (ALLOT_SERVER_NAME)")
	fs.StringVar(&o.tokenFile, "token-file", "", "file whose first line is the allocators' shared token; needs --ca (ALLOT_TOKEN_FILE)")
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(env[f.Name]); v != "" && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v", env[f.Name], v, e)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	for _, a := range strings.Split(allocators, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.allocators = append(o.allocators, a)
		}
	}
	if len(o.allocators) == 0 {
		return nil, errors.New("--allocators is empty")
	}
	return o, nil
}

// newHandler routes the service's two endpoints, /hello behind the limit.
func newHandler(c *client.Client, o *options, log *slog.Logger) (http.Handler, error) {
	limit, err := httplimit.New(c, httplimit.Options{
		Policies:   []httplimit.Policy{{Rule: o.rule}},
		KeyHeader:  o.keyHeader,
		TrustProxy: o.trustProxy,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /hello", limit.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	return mux, nil
}

// run serves until ctx ends, then drains requests in flight and returns
// the node's unused tokens to the allocator.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	tlsConfig, stopTLS, err := nodeTLS(o, log)
	if err != nil {
		return err
	}
	defer stopTLS()
	token, err := readToken(o.tokenFile)
	if err != nil {
		return err
	}
	// The service has no rules of its own: New waits a second for an
	// allocator's and fails without them (client.ErrNoRules), so the
	// service does not start unlimited. Once running, it decides on its
	// fallback allowance while the allocators are down.
	reg := newRegistry()
	c, err := client.New(client.Config{Allocators: o.allocators, NodeID: o.nodeID, TLS: tlsConfig, Token: token,
		Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	defer c.Close()
	stopMetrics, err := serveMetrics(o.metrics, reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	h, err := newHandler(c, o, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("serving", "addr", lis.Addr().String(), "allocators", o.allocators, "rule", o.rule)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	<-served // http.ErrServerClosed
	return nil
}
