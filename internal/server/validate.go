package server

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/rules"
)

// Limits bound everything a caller sends. The zero value means the defaults.
type Limits struct {
	MaxKeyBytes    int   // default: 512
	MaxNodeIDBytes int   // default: 128
	MaxBatch       int   // requests or returns per call; default: 1000
	MaxTokens      int64 // want, consumed, tokens and cost; default: rules.MaxLimit
}

// DefaultLimits returns the limits the allocator applies unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxKeyBytes:    512,  // API keys, user ids, IPv6 addresses, tenant names
		MaxNodeIDBytes: 128,  // hostnames and pod names
		MaxBatch:       1000, // a node refills at most this many keys per call
		MaxTokens:      rules.MaxLimit,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxKeyBytes > 0 {
		d.MaxKeyBytes = l.MaxKeyBytes
	}
	if l.MaxNodeIDBytes > 0 {
		d.MaxNodeIDBytes = l.MaxNodeIDBytes
	}
	if l.MaxBatch > 0 {
		d.MaxBatch = l.MaxBatch
	}
	if l.MaxTokens > 0 {
		d.MaxTokens = l.MaxTokens
	}
	return d
}

func (l Limits) checkNode(node string) error {
	if node == "" {
		return grpcerr.Invalid("node_id", "is required")
	}
	if len(node) > l.MaxNodeIDBytes {
		return grpcerr.Invalid("node_id", "is %d bytes, at most %d", len(node), l.MaxNodeIDBytes)
	}
	return nil
}

func (l Limits) checkBatch(field string, n int) error {
	if n == 0 {
		return grpcerr.Invalid(field, "is empty")
	}
	if n > l.MaxBatch {
		return grpcerr.Invalid(field, "has %d entries, at most %d", n, l.MaxBatch)
	}
	return nil
}

func (l Limits) checkKey(field, key string) error {
	if key == "" {
		return grpcerr.Invalid(field, "is required")
	}
	if len(key) > l.MaxKeyBytes {
		return grpcerr.Invalid(field, "is %d bytes, at most %d", len(key), l.MaxKeyBytes)
	}
	return nil
}

func (l Limits) checkTokens(field string, n int64) error {
	if n < 0 {
		return grpcerr.Invalid(field, "must not be negative, got %d", n)
	}
	if n > l.MaxTokens {
		return grpcerr.Invalid(field, "is %d, at most %d", n, l.MaxTokens)
	}
	return nil
}

// checkAge reads a duration a node claims: a valid google.protobuf.Duration
// (nanos within ±999,999,999 and of the seconds' sign, seconds within
// ±10,000 years), never negative. An absent one is zero.
func checkAge(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, grpcerr.Invalid(field, "is not a valid duration (seconds %d, nanos %d)", d.GetSeconds(), d.GetNanos())
	}
	age := d.AsDuration()
	if age < 0 {
		return 0, grpcerr.Invalid(field, "must not be negative, got %v", age)
	}
	return age, nil
}

// lookup finds a rule; an unknown name is NotFound, a malformed one invalid.
func lookup(set *rules.Set, field, name string) (*rules.Rule, error) {
	if err := rules.ValidName(name); err != nil {
		return nil, grpcerr.Invalid(field, "%v", err)
	}
	r, ok := set.Get(name)
	if !ok {
		return nil, grpcerr.New(codes.NotFound, fmt.Sprintf("%s: unknown rule %q", field, name),
			&errdetails.ResourceInfo{ResourceType: "allot.v1.Rule", ResourceName: name})
	}
	return r, nil
}
