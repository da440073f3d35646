// Package grpclimit is a pair of gRPC server interceptors that apply Allot
// rules to calls and refuse the way gRPC clients expect, and a client
// interceptor (RetryUnary, retry.go) that honours such refusals.
//
// Each call is charged against one rule, or against several at once, under
// a key taken from a metadata entry (an API key), an authenticated
// identity, or the peer's address. A refused call ends with
// codes.ResourceExhausted carrying google.rpc.RetryInfo (when to try
// again) and google.rpc.QuotaFailure (which rule refused, and for whom,
// with the key hashed so that it never leaves the server in clear).
//
//	lim, err := grpclimit.New(c, grpclimit.Options{
//		Policies:    []grpclimit.Policy{{Rule: "api-per-key"}},
//		KeyMetadata: "x-api-key",
//	})
//	if err != nil { ... }
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary),
//		grpc.ChainStreamInterceptor(lim.Stream),
//	)
//
// A stream is charged once, when it opens.
//
// Every policy must name a rule the client knows (client.New fails when it
// has no rules at all): New refuses one that does not, with
// client.ErrUnknownRule. A rule that a reload later removes is refused like
// the SDK refuses it: codes.Internal naming the rule, logged; a limit the
// service asks for is never skipped.
//
// When the SDK cannot decide for another reason (a closed client) the call
// proceeds and the error is logged; Options.OnError changes that, and
// FailClosed refuses instead.
package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/internal/middleware"
)

// Policy is one Allot rule applied to every call. A refusal's
// QuotaFailure gives the rule's limit as the node applies it when the call
// is refused (Client.Rule), so that a rule changed on the allocator shows
// at once; it is left out while the node does not know the rule.
type Policy struct {
	// Rule names the rule, as in the allocator's rules file.
	Rule string
	// Key returns the policy's own key for a call, used as it is (no
	// prefix: the key c.Allow would be given for the same caller), so that
	// policies can count different things, "per user AND per tenant". ok
	// false or an empty key takes the interceptor's key (see
	// Options.KeyMetadata). A key the SDK would refuse is hashed.
	// default: the interceptor's key, shared by every policy without one
	Key func(ctx context.Context, method string) (key string, ok bool)
}

// Options configures an Interceptor. Policies is required. A zero field
// takes DefaultOptions' value, which is set and explained there; a field
// DefaultOptions leaves zero is off until set, as its doc says.
type Options struct {
	// Policies are the rules every call must pass. Several are checked
	// together with Client.AllowAll: a call refused by one costs nothing
	// on the others, and the refusal names the rule that refused
	// (Decision.Rule).
	Policies []Policy

	// Cost is what a call costs, in tokens. A cost of 0 or less lets the
	// call through without counting it (health checks, reflection).
	Cost func(ctx context.Context, fullMethod string) int64

	// KeyMetadata names an incoming metadata entry holding an API key,
	// e.g. "x-api-key". The interceptor does not check the key: a caller
	// can invent new ones, so authenticate first, or prefer Identity.
	// default: none; keys come from Identity or the peer's address
	KeyMetadata string

	// Identity returns the authenticated caller, e.g. from a TLS client
	// certificate or a token checked by an earlier interceptor; ok false
	// or an empty string means anonymous. It is used when the call has no
	// API key. default: none
	Identity func(ctx context.Context) (id string, ok bool)

	// OnError decides a call the SDK could not (an unknown rule aside,
	// which is always refused), after the error is logged: nil lets the
	// call proceed, an error ends it with that error.
	OnError func(ctx context.Context, fullMethod string, err error) error

	// Logger receives SDK errors, a few a minute at most.
	Logger *slog.Logger
}

// DefaultOptions is what a zero field of Options takes, each value with
// its reason. Policies it leaves empty: New needs at least one.
func DefaultOptions() Options {
	return Options{
		Cost:    func(context.Context, string) int64 { return 1 },          // a rule counts calls unless told what one costs
		OnError: func(context.Context, string, error) error { return nil }, // fail open: a limit that cannot decide should not take the service down
		Logger:  slog.Default(),                                            // the program's own logger, as slog.SetDefault set it
	}
}

// Interceptor applies Allot rules to gRPC calls. It is safe for concurrent
// use.
type Interceptor struct {
	c        *client.Client
	opts     Options
	policies []Policy
	rules    []string       // the policies' rules
	names    string         // the rules, comma-separated, for messages
	errLogs  rate.Sometimes // an unknown rule fails every call: log a few
	// slotPolicies are the policies on concurrency rules: a slot held for
	// the call's life (slots.go).
	slotPolicies []Policy
}

// New checks the options and builds the interceptors. Every policy must
// name a rule the client knows. The client is used, not owned: close it
// after the server has stopped.
func New(c *client.Client, opts Options) (*Interceptor, error) {
	if c == nil {
		return nil, errors.New("grpclimit: New: the client is nil")
	}
	rules, err := middleware.PolicyRules("grpclimit", c, opts.Policies, func(p Policy) string { return p.Rule })
	if err != nil {
		return nil, err
	}
	d := DefaultOptions()
	if opts.Cost == nil {
		opts.Cost = d.Cost
	}
	if opts.OnError == nil {
		opts.OnError = d.OnError
	}
	if opts.Logger == nil {
		opts.Logger = d.Logger
	}
	i := &Interceptor{c: c, opts: opts, policies: append([]Policy(nil), opts.Policies...), rules: rules,
		errLogs: middleware.ErrorLogs()}
	i.splitSlots()
	i.names = strings.Join(i.rules, ",")
	return i, nil
}

// Unary is a grpc.UnaryServerInterceptor.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	held, err := i.takeSlots(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	defer middleware.ReleaseSlots(held)
	if err := i.admit(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is a grpc.StreamServerInterceptor. The stream is charged once,
// before its handler runs.
func (i *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	held, err := i.takeSlots(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	defer middleware.ReleaseSlots(held)
	if err := i.admit(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// admit decides a call; a non-nil error is the call's answer.
func (i *Interceptor) admit(ctx context.Context, method string) error {
	n := i.opts.Cost(ctx, method)
	if n <= 0 || len(i.policies) == 0 {
		return nil
	}
	var buf [4]string // (policies are few: no allocation for the keys)
	keys := i.keys(ctx, method, buf[:0])
	d, err := i.decide(ctx, keys, n)
	key := keys[0]
	for j, p := range i.policies {
		if p.Rule == d.Rule {
			key = keys[j] // the refusing policy's, for the answer
		}
	}
	switch {
	case errors.Is(err, client.ErrCostAboveCapacity):
		// Not a fault of the limiter: this call can never pass, and letting
		// it through would let anyone skip the limit by asking for more.
		return tooCostly(i.names, redact(key), n)
	case errors.Is(err, client.ErrUnknownRule):
		// A rule the service asks for is gone (a reload removed it): refuse,
		// as the SDK does, rather than let the call through unlimited.
		i.errLogs.Do(func() {
			i.opts.Logger.Error("grpclimit: call refused: a policy's rule is unknown", "rules", i.names, "method", method, "err", err)
		})
		return status.Errorf(codes.Internal, "rate limit %s is not defined", i.unknownRules())
	case err != nil:
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		i.errLogs.Do(func() {
			i.opts.Logger.Warn("grpclimit: call not decided", "rules", i.names, "method", method, "err", err)
		})
		return i.opts.OnError(ctx, method, err)
	case d.Allowed:
		return nil
	}
	return i.exhausted(d, redact(key))
}

func (i *Interceptor) decide(ctx context.Context, keys []string, n int64) (client.Decision, error) {
	if len(i.policies) == 1 {
		return i.c.AllowN(ctx, i.policies[0].Rule, keys[0], n)
	}
	limits := make([]client.RuleKey, len(i.policies))
	for j, p := range i.policies {
		limits[j] = client.RuleKey{Rule: p.Rule, Key: keys[j]}
	}
	return i.c.AllowAll(ctx, n, limits...)
}

// keys appends the policies' keys for a call to keys: each one's own, or
// the interceptor's, worked out once.
func (i *Interceptor) keys(ctx context.Context, method string, keys []string) []string {
	shared := ""
	for _, p := range i.policies {
		if p.Key != nil {
			if k, ok := p.Key(ctx, method); ok && k != "" {
				keys = append(keys, middleware.BoundedKey("", k))
				continue
			}
		}
		if shared == "" {
			shared = i.key(ctx)
		}
		keys = append(keys, shared)
	}
	return keys
}

// unknownRules are the policies' rules the client does not know now,
// quoted and comma-separated.
func (i *Interceptor) unknownRules() string {
	names := middleware.Unknown(i.c, i.rules)
	for j, n := range names {
		names[j] = strconv.Quote(n)
	}
	return strings.Join(names, ", ")
}

// FailClosed is an Options.OnError that ends a call the SDK could not
// decide with codes.Unavailable.
func FailClosed(_ context.Context, _ string, _ error) error {
	return status.Error(codes.Unavailable, "rate limiter could not decide this call")
}
