package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Admin implements allot.v1.Admin: runtime overrides, kept in the store
// and served through an Overlay. Who may call it is the allocator's guard's
// business; Admin logs each change with the caller's identity, which the
// guard puts in the context (WithCaller).
type Admin struct {
	allotv1.UnimplementedAdminServer
	srv     *Server
	overlay *Overlay
	log     *slog.Logger
}

// NewAdmin serves the Admin service on the overlay's store.
func NewAdmin(srv *Server, o *Overlay) *Admin {
	return &Admin{srv: srv, overlay: o, log: srv.log}
}

// Register adds the Admin service to g.
func (a *Admin) Register(g *grpc.Server) { allotv1.RegisterAdminServer(g, a) }

type callerKey struct{}

// WithCaller is ctx carrying the identity an admin call was authenticated
// as ("cert:alice", "token:3f2a9c01"), for the audit log.
func WithCaller(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, callerKey{}, who)
}

func caller(ctx context.Context) string {
	if who, ok := ctx.Value(callerKey{}).(string); ok {
		return who
	}
	return "unknown"
}

// Bounds of what an admin call may send.
const (
	maxNoteBytes    = 256
	defaultPageSize = 100
	maxPageSize     = 1000
)

// SetOverride implements allot.v1.Admin.
func (a *Admin) SetOverride(ctx context.Context, req *allotv1.SetOverrideRequest) (*allotv1.SetOverrideResponse, error) {
	r, err := a.fileRule(req.GetRule(), req.GetKey())
	if err != nil {
		return nil, err
	}
	if p := req.GetPeriod(); p != nil && p.AsDuration() != r.Period {
		return nil, grpcerr.Invalid("period", "%v is not the rule's period %v: an override keeps its rule's period, as the file's do; give the limit per %v",
			p.AsDuration(), r.Period, r.Period)
	}
	now := a.srv.clock.Now()
	expires, err := expiry(req, now)
	if err != nil {
		return nil, err
	}
	if len(req.GetNote()) > maxNoteBytes || !utf8.ValidString(req.GetNote()) {
		return nil, grpcerr.Invalid("note", "must be at most %d bytes of UTF-8", maxNoteBytes)
	}
	o := rules.RuntimeOverride{Rule: r.Name, Key: req.GetKey(), Limit: req.GetLimit(), Burst: req.GetBurst(),
		Expires: expires, SetBy: caller(ctx), SetAt: now.Truncate(time.Millisecond), Note: req.GetNote()}
	if err := r.CheckRuntime(&o); err != nil {
		var fe *rules.FieldError
		if errors.As(err, &fe) {
			return nil, grpcerr.Invalid(fe.Field, "%s", fe.Msg)
		}
		return nil, grpcerr.Invalid("limit", "%v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, a.srv.timeout)
	defer cancel()
	// The file's overrides count against the rule's cap, so that a merge
	// never has to leave the API's out.
	if _, err := a.overlay.store.PutOverride(sctx, o, max(rules.MaxOverrides-len(r.Overrides), 0)); err != nil {
		if errors.Is(err, store.ErrOverridesFull) {
			return nil, grpcerr.New(codes.ResourceExhausted, fmt.Sprintf("rule %q holds %d overrides, file and API together, at most: delete some first", r.Name, rules.MaxOverrides),
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "allot.v1.Rule/" + r.Name, Description: err.Error()}}})
		}
		return nil, a.srv.storeError(ctx, "admin", err)
	}
	version := a.apply(ctx)
	out := a.toProto(o) // its burst as the served rule fills it in
	a.log.Info("admin: override set", "rule", o.Rule, "key", o.Key, "limit", o.Limit, "burst", out.Burst,
		"expires", optTime(o.Expires), "note", o.Note, "by", o.SetBy, "rules_version", version)
	return &allotv1.SetOverrideResponse{Override: out, RulesVersion: version}, nil
}

// expiry is when the override requested stops applying: zero for never.
func expiry(req *allotv1.SetOverrideRequest, now time.Time) (time.Time, error) {
	ttl, at := req.GetTtl(), req.GetExpiresAt()
	switch {
	case ttl != nil && at != nil:
		return time.Time{}, grpcerr.Invalid("ttl", "give ttl or expires_at, not both")
	case ttl != nil:
		if err := ttl.CheckValid(); err != nil || ttl.AsDuration() <= 0 {
			return time.Time{}, grpcerr.Invalid("ttl", "must be a positive duration, got %v", ttl.AsDuration())
		}
		// Rounded up to the store's millisecond: never shorter than asked.
		return now.Add(ttl.AsDuration() + time.Millisecond - 1).Truncate(time.Millisecond), nil
	case at != nil:
		if err := at.CheckValid(); err != nil {
			return time.Time{}, grpcerr.Invalid("expires_at", "%v", err)
		}
		t := at.AsTime()
		if !t.After(now) {
			return time.Time{}, grpcerr.Invalid("expires_at", "%v is not in the future (the allocator's clock says %v)", t.UTC(), now.UTC())
		}
		return t.Add(time.Millisecond - 1).Truncate(time.Millisecond), nil
	}
	return time.Time{}, nil
}

// apply serves the change at once on this allocator, and returns the
// rules version it serves. A failed read of the store leaves it to the
// next poll: the change is stored, so it is not the caller's error.
func (a *Admin) apply(ctx context.Context) string {
	if err := a.overlay.Sync(ctx); err != nil {
		a.log.Warn("admin: the change is stored; applying it waits for the next poll", "err", err)
	}
	return a.srv.Rules().Version()
}

// GetOverride implements allot.v1.Admin.
func (a *Admin) GetOverride(ctx context.Context, req *allotv1.GetOverrideRequest) (*allotv1.GetOverrideResponse, error) {
	r, err := a.fileRule(req.GetRule(), req.GetKey())
	if err != nil {
		return nil, err
	}
	if err := a.overlay.Sync(ctx); err != nil {
		return nil, a.srv.storeError(ctx, "admin", err)
	}
	eff := a.effective(r, req.GetKey())
	o, ok := a.overlay.Lookup(r.Name, req.GetKey())
	if !ok {
		return nil, grpcerr.New(codes.NotFound,
			fmt.Sprintf("key %q of rule %q has no override set through the API; it takes the %s's limit %d, burst %d", req.GetKey(), r.Name, eff.Source, eff.Limit, eff.Burst),
			&errdetails.ResourceInfo{ResourceType: "allot.v1.RuntimeOverride", ResourceName: r.Name + "/" + req.GetKey()})
	}
	return &allotv1.GetOverrideResponse{Override: a.toProto(o), Effective: eff}, nil
}

// effective is what key resolves to on this allocator, and from where.
func (a *Admin) effective(file *rules.Rule, key string) *allotv1.EffectiveLimit {
	source := "rule"
	if _, ok := a.overlay.Lookup(file.Name, key); ok {
		source = "api"
	} else if file.ForKey(key) != file {
		source = "file"
	}
	r := file.ForKey(key)
	if served, ok := a.srv.Rules().Get(file.Name); ok {
		r = served.ForKey(key)
	}
	return &allotv1.EffectiveLimit{Limit: r.Limit, Burst: r.Burst, Period: durationpb.New(r.Period), Source: source}
}

// ListOverrides implements allot.v1.Admin.
func (a *Admin) ListOverrides(ctx context.Context, req *allotv1.ListOverridesRequest) (*allotv1.ListOverridesResponse, error) {
	r, err := lookup(a.overlay.File(), "rule", req.GetRule())
	if err != nil {
		return nil, err
	}
	n := int(req.GetPageSize())
	switch {
	case n == 0:
		n = defaultPageSize
	case n > maxPageSize:
		return nil, grpcerr.Invalid("page_size", "at most %d, got %d", maxPageSize, n)
	}
	after, err := base64.RawURLEncoding.DecodeString(req.GetPageToken())
	if err != nil {
		return nil, grpcerr.Invalid("page_token", "not a token this service gave: %v", err)
	}
	if err := a.overlay.Sync(ctx); err != nil {
		return nil, a.srv.storeError(ctx, "admin", err)
	}
	page, more := a.overlay.List(r.Name, string(after), n)
	resp := &allotv1.ListOverridesResponse{Overrides: make([]*allotv1.RuntimeOverride, len(page))}
	for i, o := range page {
		resp.Overrides[i] = a.toProto(o)
	}
	if more {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Key))
	}
	return resp, nil
}

// DeleteOverride implements allot.v1.Admin.
func (a *Admin) DeleteOverride(ctx context.Context, req *allotv1.DeleteOverrideRequest) (*allotv1.DeleteOverrideResponse, error) {
	r, err := a.fileRule(req.GetRule(), req.GetKey())
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, a.srv.timeout)
	defer cancel()
	old, ok, err := a.overlay.store.DeleteOverride(sctx, r.Name, req.GetKey())
	if err != nil {
		return nil, a.srv.storeError(ctx, "admin", err)
	}
	if !ok {
		return nil, grpcerr.New(codes.NotFound, fmt.Sprintf("key %q of rule %q has no override set through the API", req.GetKey(), r.Name),
			&errdetails.ResourceInfo{ResourceType: "allot.v1.RuntimeOverride", ResourceName: r.Name + "/" + req.GetKey()})
	}
	out := a.toProto(old) // before the rules served lose its burst
	version := a.apply(ctx)
	a.log.Info("admin: override deleted", "rule", r.Name, "key", req.GetKey(), "limit", old.Limit,
		"set_by", old.SetBy, "by", caller(ctx), "rules_version", version)
	return &allotv1.DeleteOverrideResponse{Override: out, RulesVersion: version}, nil
}

// fileRule is the named rule of the rules file, once the key checks out.
func (a *Admin) fileRule(name, key string) (*rules.Rule, error) {
	r, err := lookup(a.overlay.File(), "rule", name)
	if err != nil {
		return nil, err
	}
	if err := a.srv.limits.checkKey("key", key); err != nil {
		return nil, err
	}
	return r, nil
}

// toProto is o on the wire, its burst as the served rule fills it in.
func (a *Admin) toProto(o rules.RuntimeOverride) *allotv1.RuntimeOverride {
	burst := o.Burst
	if served, ok := a.srv.Rules().Get(o.Rule); ok && burst == 0 && served.Algorithm == rules.TokenBucket {
		if kr := served.ForKey(o.Key); kr.Limit == o.Limit {
			burst = kr.Burst
		}
	}
	out := &allotv1.RuntimeOverride{Rule: o.Rule, Key: o.Key, Limit: o.Limit, Burst: burst, SetBy: o.SetBy, Note: o.Note}
	if !o.Expires.IsZero() {
		out.ExpiresAt = timestamppb.New(o.Expires)
	}
	if !o.SetAt.IsZero() {
		out.SetAt = timestamppb.New(o.SetAt)
	}
	return out
}

// optTime is t for a log line: "never" for the zero time.
func optTime(t time.Time) any {
	if t.IsZero() {
		return "never"
	}
	return t.UTC()
}
