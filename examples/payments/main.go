// Command payments is a small HTTP service whose POST /payments a client
// may retry safely: it sits behind client/idempotency, so a retry with the
// same Idempotency-Key gets the first answer back and the payment is made
// once, on any instance that shares the Redis.
//
//	go run ./examples/payments                                   # keys in memory: one process
//	go run ./examples/payments --redis redis://127.0.0.1:6379/0  # keys in Redis: a fleet
//	curl -i -H 'X-API-Key: demo' -H 'Idempotency-Key: "order-1"' \
//	    -d '{"amount":1000,"currency":"EUR"}' localhost:8081/payments
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
	"syscall"
	"time"

	"github.com/allot-dev/allot/client/idempotency"
)

type options struct {
	listen      string
	redis       string // "" keeps keys in this process
	scopeHeader string
	requireKey  bool
	paymentTime time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// env names the variable that sets each flag.
var env = map[string]string{
	"listen":       "PAYMENTS_LISTEN",
	"redis":        "PAYMENTS_REDIS",
	"scope-header": "PAYMENTS_SCOPE_HEADER",
	"require-key":  "PAYMENTS_REQUIRE_KEY",
	"payment-time": "PAYMENTS_PAYMENT_TIME",
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8081", "HTTP listen address (PAYMENTS_LISTEN)")
	fs.StringVar(&o.redis, "redis", "", "Redis URL for the keys, shared by every instance (PAYMENTS_REDIS). Default: in this process's memory")
	fs.StringVar(&o.scopeHeader, "scope-header", "X-API-Key", "request header naming the caller, whose keys are its own (PAYMENTS_SCOPE_HEADER)")
	fs.BoolVar(&o.requireKey, "require-key", false, "refuse a POST without an Idempotency-Key with 400 (PAYMENTS_REQUIRE_KEY)")
	fs.DurationVar(&o.paymentTime, "payment-time", 500*time.Millisecond, "how long a payment takes: a retry sooner gets 409 (PAYMENTS_PAYMENT_TIME)")
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
	if o.scopeHeader == "" {
		return nil, errors.New("--scope-header is empty: keys would be shared by every caller")
	}
	return o, nil
}

// newMiddleware keeps keys in Redis when o names one, else in memory.
func newMiddleware(o *options, log *slog.Logger) (*idempotency.Middleware, error) {
	opts := idempotency.Options{
		RedisURL: o.redis,
		// A real service takes the caller from its authentication; this
		// one trusts the header, which is fine for a demonstration only.
		Scope:   func(r *http.Request) string { return r.Header.Get(o.scopeHeader) },
		Require: o.requireKey,
		Logger:  log,
	}
	if o.redis == "" {
		opts.Store = idempotency.NewMemoryStore()
	}
	return idempotency.New(opts)
}

// run serves until ctx ends, then drains requests in flight.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	mw, err := newMiddleware(o, log)
	if err != nil {
		return err
	}
	defer mw.Close()
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(mw, newLedger(o.paymentTime)), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	store := "memory"
	if o.redis != "" {
		store = "redis"
	}
	log.Info("serving", "addr", lis.Addr().String(), "store", store)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	<-served // http.ErrServerClosed
	return nil
}
