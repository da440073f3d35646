// Command llmproxy is an LLM-proxy-style service whose cost is known only
// once a completion ends: each POST /v1/completions is admitted on an
// estimate of one token, and the handler reports the tokens the model
// used in X-Tokens-Used; httplimit settles the request at that cost, so a
// key whose completions ran long is in debt and refused (429 with a
// Retry-After saying when refill repays it) until its rule's rate has paid.
// A second policy, on a concurrency rule, holds a slot of the key for each
// completion's life: at most four run at once per key across the fleet,
// the fifth is refused 429 with a Retry-After of the time completions take.
//
//	go run ./examples/llmproxy                                # decides alone on its own rule
//	go run ./examples/llmproxy --allocators 127.0.0.1:7070    # a rule of the allocator's
//	curl -i -H 'X-API-Key: demo' -d '{"prompt":"hello","max_tokens":300}' localhost:8082/v1/completions
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/httplimit"
)

type options struct {
	listen     string
	allocators string // comma-separated; "" decides alone
	rule       string
	inflight   string // the concurrency rule; "" for none
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "llmproxy:", err)
		os.Exit(1)
	}
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("llmproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8082", "HTTP listen address")
	fs.StringVar(&o.allocators, "allocators", "", "comma-separated allocator addresses; empty: decide alone on the rule "+localRule.Name)
	fs.StringVar(&o.rule, "rule", localRule.Name, "the rule limiting each API key's tokens")
	fs.StringVar(&o.inflight, "inflight-rule", localInFlight.Name, "the concurrency rule limiting each API key's completions in flight; empty: none")
	return o, fs.Parse(args)
}

// localRule is what the proxy decides by without an allocator: 10,000
// model tokens a minute per key, in bursts of 2,000, a debt of one burst.
var localRule = client.Rule{Name: "llm-tokens", Algorithm: "token_bucket", Limit: 10_000, Period: time.Minute, Burst: 2_000}

// localInFlight: four completions of a key at once, as a model serves a
// few in parallel and queues the rest.
var localInFlight = client.Rule{Name: "llm-inflight", Algorithm: "concurrency", Limit: 4}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	c, err := newClient(o, log)
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := newHandler(c, o, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Info("serving", "addr", ln.Addr().String(), "rule", o.rule, "allocators", o.allocators)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newClient(o *options, log *slog.Logger) (*client.Client, error) {
	cfg := client.Config{Logger: log}
	if o.allocators == "" {
		cfg.Rules = []client.Rule{localRule, localInFlight}
	} else {
		cfg.Allocators = strings.Split(o.allocators, ",")
	}
	return client.New(cfg)
}

// newHandler serves completions behind the limits: a slot of the key held
// while the completion runs, and its tokens admitted on an estimate of one,
// settled at the tokens the model used.
func newHandler(c *client.Client, o *options, log *slog.Logger) (http.Handler, error) {
	policies := []httplimit.Policy{{Rule: o.rule}}
	if o.inflight != "" {
		policies = append(policies, httplimit.Policy{Rule: o.inflight})
	}
	mw, err := httplimit.New(c, httplimit.Options{
		Policies:     policies,
		KeyHeader:    "X-API-Key",
		SettleHeader: "X-Tokens-Used",
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", mw.Wrap(http.HandlerFunc(complete)))
	return mux, nil
}

type completionRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// complete stands in for a model: it "generates" max_tokens tokens (16 by
// default) and reports what the prompt and the completion used.
func complete(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, "want a JSON body with prompt and max_tokens", http.StatusBadRequest)
		w.Header().Set("X-Tokens-Used", "0") // nothing ran: the estimate comes back
		return
	}
	if req.MaxTokens <= 0 {
		req.MaxTokens = 16
	}
	used := int64(len(strings.Fields(req.Prompt))) + req.MaxTokens
	w.Header().Set("X-Tokens-Used", strconv.FormatInt(used, 10))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"text": strings.Repeat("lorem ", int(min(req.MaxTokens, 64))), "usage": map[string]int64{"total_tokens": used}})
}
