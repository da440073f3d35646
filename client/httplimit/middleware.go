// Package httplimit is net/http middleware that applies Allot rules to
// requests and answers a refusal the way HTTP clients expect.
//
// Each request is charged against one rule, or against several at once
// ("10 a second and 1,000 an hour"), under a key taken from an API-key
// header, an authenticated identity, or the client's IP address. A refused
// request gets 429 Too Many Requests with Retry-After, the IETF RateLimit
// and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10) and
// an application/problem+json body (RFC 9457); a served one gets the two
// RateLimit fields too, so that well-behaved clients can pace themselves.
// A request that costs more than a rule holds at once can never pass: its
// 429 has RateLimit-Policy and a problem saying it cannot pass, and no
// Retry-After or RateLimit, since no retry would help and nothing was
// decided.
//
//	mw, err := httplimit.New(c, httplimit.Options{
//		Policies:  []httplimit.Policy{{Rule: "api-per-key"}},
//		KeyHeader: "X-API-Key",
//	})
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw.Wrap(mux))
//
// Every policy must name a rule the client knows (client.New fails when it
// has no rules at all): New refuses one that does not, with
// client.ErrUnknownRule. A rule that a reload later removes is refused like
// the SDK refuses it: 500 Internal Server Error, with a problem naming the
// rule, and logged; a limit the service asks for is never skipped.
//
// When the SDK cannot decide for another reason (a closed client) the
// request is served and the error logged: a limiter fault must not become
// an API outage. Options.OnError changes that; FailClosed refuses instead.
package httplimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"

	"golang.org/x/time/rate"

	"github.com/allot-dev/allot/client"
	"github.com/allot-dev/allot/client/internal/middleware"
)

// Policy is one Allot rule applied to every request.
//
// The rule's figures are not configured here: the policy is advertised in
// RateLimit-Policy with the rule's limit as q and its period as w (in
// seconds, rounded up), read from Client.Rule for each response, so that a
// rule changed on the allocator shows at once. A rule the node does not
// know yet is left out of RateLimit-Policy, which the draft allows.
type Policy struct {
	// Rule names the rule, as in the allocator's rules file. It is also the
	// policy's name in the RateLimit fields.
	Rule string
	// Key returns the policy's own key for r, used as it is (no prefix:
	// the key c.Allow would be given for the same caller), so that
	// policies can count different things, "per user AND per tenant". ok
	// false or an empty key takes the middleware's key (see
	// Options.KeyHeader). A key the SDK would refuse (over 512 bytes, not
	// UTF-8) is hashed, as the middleware's are.
	// default: the middleware's key, shared by every policy without one
	Key func(r *http.Request) (key string, ok bool)
}

// Options configures a Middleware. Policies is required. A zero field
// takes DefaultOptions' value, which is set and explained there; a field
// DefaultOptions leaves zero is off until set, as its doc says.
type Options struct {
	// Policies are the rules every request must pass. Several are checked
	// together with Client.AllowAll: a request refused by one costs nothing
	// on the others. RateLimit-Policy lists them all; RateLimit, and a
	// refusal's problem, name the one the decision is about
	// (Decision.Rule): the rule that refused, or, when all passed, the one
	// with the least remaining.
	Policies []Policy

	// Cost is what a request costs, in tokens. A cost of 0 or less lets the
	// request through without counting it (health checks, OPTIONS), and it
	// is not settled. With settling on (SettleHeader or SettleCallback) it is
	// the estimate that admits the request; once the handler returns, the
	// request is settled at what it reports (settle.go).
	Cost func(*http.Request) int64

	// SettleHeader names a response header (or trailer, for a cost known
	// only once a streamed body ends) in which the handler reports what
	// the request cost, e.g. "X-Tokens-Used": the middleware settles the
	// request at that cost once the handler returns. Settling takes one
	// policy. default: none
	SettleHeader string

	// SettleCallback turns on settling from the handler's own call of
	// ReportCost(r.Context(), n); a report there wins over SettleHeader.
	// Settling takes one policy. default: false
	SettleCallback bool

	// KeyHeader names a request header holding an API key, e.g.
	// "X-API-Key". The middleware's key, for the policies without a Key of
	// their own, is the API key, else the Identity, else the client's IP,
	// each with a prefix naming its kind ("key:", "id:", "ip:"), so that an
	// API key spelled like an address cannot spend that address's quota:
	// c.Allow(ctx, rule, "key:"+apiKey) spends from the same bucket. The middleware does not check the key: a caller can
	// invent new ones, so put it behind authentication, or prefer Identity.
	// default: none; keys come from Identity or the client's IP
	KeyHeader string

	// Identity returns the authenticated caller, e.g. from a session set
	// by earlier middleware; ok false or an empty string means anonymous.
	// It is used when the request has no API key. default: none
	Identity func(r *http.Request) (id string, ok bool)

	// TrustProxy takes the client's IP from the last X-Forwarded-For entry
	// instead of the connection's address. Set it only when exactly one
	// reverse proxy you run sits in front of the service and appends that
	// header: without a proxy anyone can write X-Forwarded-For and choose
	// a fresh key per request, and the entries before the last are written
	// by the client, so only the last one, added by your proxy, is taken.
	// default: false, the connection's address (RemoteAddr)
	TrustProxy bool

	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds from now) for clients that predate the
	// RateLimit fields. default: false
	LegacyHeaders bool

	// OnError answers a request the SDK could not decide (an unknown rule
	// aside, which is always refused), after the error is logged. It
	// returns true when it has written a response, false to serve the
	// request.
	OnError func(w http.ResponseWriter, r *http.Request, err error) (handled bool)

	// Logger receives SDK errors, a few a minute at most.
	Logger *slog.Logger
}

// DefaultOptions is what a zero field of Options takes, each value with
// its reason. Policies it leaves empty: New needs at least one.
func DefaultOptions() Options {
	return Options{
		Cost:    func(*http.Request) int64 { return 1 },                                // a rule counts requests unless told what one costs
		OnError: func(http.ResponseWriter, *http.Request, error) bool { return false }, // fail open: a limit that cannot decide should not take the service down
		Logger:  slog.Default(),                                                        // the program's own logger, as slog.SetDefault set it
	}
}

// Middleware applies Allot rules to HTTP requests. It is safe for
// concurrent use.
type Middleware struct {
	c        *client.Client
	opts     Options
	policies []Policy
	rules    []string // the policies' rules
	keyHdr   string
	errLogs  rate.Sometimes // an unknown rule fails every request: log a few
	settles  bool           // requests are settled once the handler returns
	// slotPolicies are the policies on concurrency rules: a slot held for
	// the handler's life (slots.go).
	slotPolicies []Policy
}

// New checks the options and builds the middleware. Every policy must name
// a rule the client knows. The client is used, not owned: close it after
// the server has stopped.
func New(c *client.Client, opts Options) (*Middleware, error) {
	if c == nil {
		return nil, errors.New("httplimit: New: the client is nil")
	}
	rules, err := middleware.PolicyRules("httplimit", c, opts.Policies, func(p Policy) string { return p.Rule })
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
	m := &Middleware{c: c, opts: opts, policies: append([]Policy(nil), opts.Policies...), rules: rules,
		errLogs: middleware.ErrorLogs()}
	if opts.KeyHeader != "" {
		m.keyHdr = textproto.CanonicalMIMEHeaderKey(opts.KeyHeader)
	}
	m.splitSlots()
	m.settles = opts.SettleHeader != "" || opts.SettleCallback
	if m.settles && len(m.policies) != 1 {
		return nil, fmt.Errorf("httplimit: New: settling takes one policy (beside those on concurrency rules), got %d", len(m.policies))
	}
	return m, nil
}

// Wrap returns next behind the limit. Its method value is a
// func(http.Handler) http.Handler, the shape routers take.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held, ok := m.takeSlots(w, r)
		if !ok {
			return
		}
		defer middleware.ReleaseSlots(held)
		if len(m.policies) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		res, ok := m.admit(w, r)
		switch {
		case !ok:
		case res != nil:
			m.serveSettled(w, r, res, next)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// admit decides r, writes the RateLimit fields, and answers a refusal. It
// reports whether the request should be served, and, when it is to be
// settled, its reservation.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request) (*client.Reservation, bool) {
	n := m.opts.Cost(r)
	if n <= 0 {
		return nil, true
	}
	d, res, err := m.decide(r, n)
	switch {
	case errors.Is(err, client.ErrCostAboveCapacity):
		// Not a fault of the limiter: this request can never pass, and
		// serving it would let anyone skip the limit by asking for more.
		// RateLimit-Policy shows the limits; no Retry-After, since no
		// retry can pass, and no RateLimit, since nothing was decided.
		m.setPolicy(w.Header())
		writeProblem(w, tooCostly(n))
		return nil, false
	case errors.Is(err, client.ErrUnknownRule):
		// A rule the service asks for is gone (a reload removed it): refuse,
		// as the SDK does, rather than serve without the limit.
		m.errLogs.Do(func() {
			m.opts.Logger.Error("httplimit: request refused: a policy's rule is unknown", "rules", m.rules, "err", err)
		})
		writeProblem(w, unknownRule(middleware.Unknown(m.c, m.rules)))
		return nil, false
	case err != nil:
		if r.Context().Err() != nil {
			return nil, false // the caller has gone; nobody to answer
		}
		m.errLogs.Do(func() {
			m.opts.Logger.Warn("httplimit: request not decided", "rules", m.rules, "err", err)
		})
		return nil, !m.opts.OnError(w, r, err)
	}
	m.setFields(w.Header(), d)
	if d.Allowed {
		return res, true
	}
	w.Header().Set("Retry-After", fmtInt(retrySeconds(d.RetryAfter)))
	writeProblem(w, quotaExceeded(d.Rule, d.RetryAfter))
	return nil, false
}

func (m *Middleware) decide(r *http.Request, n int64) (client.Decision, *client.Reservation, error) {
	ctx := r.Context()
	if m.settles {
		res, err := m.c.Reserve(ctx, m.policies[0].Rule, m.policyKey(r, m.policies[0], ""), n)
		if err != nil {
			return client.Decision{}, nil, err
		}
		return res.Decision, res, nil
	}
	if len(m.policies) == 1 {
		d, err := m.c.AllowN(ctx, m.policies[0].Rule, m.policyKey(r, m.policies[0], ""), n)
		return d, nil, err
	}
	limits := make([]client.RuleKey, len(m.policies))
	shared := ""
	for i, p := range m.policies {
		limits[i] = client.RuleKey{Rule: p.Rule, Key: m.policyKey(r, p, shared)}
		if p.Key == nil {
			shared = limits[i].Key // (one middleware key per request)
		}
	}
	d, err := m.c.AllowAll(ctx, n, limits...)
	return d, nil, err
}

// policyKey is p's key for r: its own, or the middleware's (shared, when
// already worked out for this request).
func (m *Middleware) policyKey(r *http.Request, p Policy, shared string) string {
	if p.Key != nil {
		if k, ok := p.Key(r); ok && k != "" {
			return middleware.BoundedKey("", k)
		}
	}
	if shared != "" {
		return shared
	}
	return m.key(r)
}

// FailClosed is an Options.OnError that refuses a request the SDK could
// not decide with 503 Service Unavailable and a problem+json body.
func FailClosed(w http.ResponseWriter, _ *http.Request, _ error) bool {
	writeProblem(w, undecided())
	return true
}
