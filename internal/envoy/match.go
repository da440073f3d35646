package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/store"
)

// Bounds on a request. Envoy sends a handful of descriptors of a few
// entries each; the bounds keep a caller from making the service work hard.
const (
	MaxDescriptors = 64   // descriptors in one request
	MaxEntries     = 32   // entries in one descriptor
	MaxEntryBytes  = 1024 // bytes of one entry's key or value
	maxKeyBytes    = 512  // a store key; longer ones are hashed
)

// check is one descriptor of a request: its limit, and then its decision.
type check struct {
	limit *rules.EnvoyLimit // nil: no limit applies (none matched, or replaced)
	// replaced is set when another matched limit replaces this one.
	replaced bool
	// override is set for a limit the request gave itself (limit field).
	override bool
	key      string // the store key: the descriptor's entries
	hits     uint64 // what the request adds to the limit

	// The decision, filled by decide.
	d    store.Decision
	over bool // the limit refuses (a shadow limit would have)
	// never: the limit refuses and no retry can pass (a limit of 0, or
	// more hits than the limit holds); no retry-after is given for it.
	never bool
}

// match validates a request and finds each descriptor's limit in dom (nil:
// an unknown domain, where nothing is limited, as in envoyproxy/ratelimit).
func match(dom *rules.EnvoyDomain, req *rlspb.RateLimitRequest) ([]check, error) {
	if req.GetDomain() == "" {
		return nil, grpcerr.Invalid("domain", "is required")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, grpcerr.Invalid("descriptors", "is empty: give at least one descriptor")
	}
	if len(ds) > MaxDescriptors {
		return nil, grpcerr.Invalid("descriptors", "has %d descriptors, at most %d", len(ds), MaxDescriptors)
	}
	hits := uint64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // not set: one hit
	}
	checks := make([]check, len(ds))
	for i, d := range ds {
		field := fmt.Sprintf("descriptors[%d]", i)
		if err := validate(field, d); err != nil {
			return nil, err
		}
		c := &checks[i]
		c.hits = hits
		if h := d.GetHitsAddend(); h != nil {
			c.hits = h.GetValue() // 0 asks without counting
		}
		if dom == nil {
			continue
		}
		if d.GetLimit() != nil {
			l, err := overrideLimit(dom, field+".limit", d)
			if err != nil {
				return nil, err
			}
			c.limit, c.override = l, true
		} else {
			entries := d.GetEntries()
			c.limit = dom.Lookup(len(entries), func(j int) (string, string) {
				return entries[j].GetKey(), entries[j].GetValue()
			})
		}
		if c.limit != nil {
			c.key = storeKey(d.GetEntries(), c.limit.Shared)
		}
	}
	replace(checks)
	return checks, nil
}

// validate checks one descriptor's entries and the fields Allot does not
// serve.
func validate(field string, d *ratelimitpb.RateLimitDescriptor) error {
	entries := d.GetEntries()
	if len(entries) == 0 {
		return grpcerr.Invalid(field+".entries", "is empty: a descriptor has at least one entry")
	}
	if len(entries) > MaxEntries {
		return grpcerr.Invalid(field+".entries", "has %d entries, at most %d", len(entries), MaxEntries)
	}
	for j, e := range entries {
		f := fmt.Sprintf("%s.entries[%d]", field, j)
		switch {
		case e.GetKey() == "":
			return grpcerr.Invalid(f+".key", "is required")
		case len(e.GetKey()) > MaxEntryBytes:
			return grpcerr.Invalid(f+".key", "is %d bytes, at most %d", len(e.GetKey()), MaxEntryBytes)
		case len(e.GetValue()) > MaxEntryBytes:
			return grpcerr.Invalid(f+".value", "is %d bytes, at most %d", len(e.GetValue()), MaxEntryBytes)
		}
	}
	if d.GetIsNegativeHits() {
		return grpcerr.Invalid(field+".is_negative_hits", "giving hits back is not supported")
	}
	return nil
}

// overrideLimit is the limit a descriptor brings with it (Envoy's
// RateLimitOverride): counted by the domain's algorithm, per descriptor
// entries, under a rule named for the domain, the entries' keys and the
// period.
func overrideLimit(dom *rules.EnvoyDomain, field string, d *ratelimitpb.RateLimitDescriptor) (*rules.EnvoyLimit, error) {
	o := d.GetLimit()
	unit := rules.EnvoyUnit(o.GetUnit())
	if unit.Duration() == 0 {
		return nil, grpcerr.Invalid(field+".unit", "must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR, got %v", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = m.GetValue()
		if most := uint32(rules.MaxPeriod / unit.Duration()); mult < 1 || mult > most {
			return nil, grpcerr.Invalid(field+".unit_multiplier", "must be from 1 to %d (a period of at most %v), got %d", most, rules.MaxPeriod, mult)
		}
	}
	period := unit.Duration() * time.Duration(mult)
	path := make([]rules.EnvoyEntry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		path[i] = rules.EnvoyEntry{Key: e.GetKey()}
	}
	id := rules.EnvoyRuleName(dom.Name, "override", path, period)
	l := &rules.EnvoyLimit{ID: id, Path: "override", RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, UnitMultiplier: mult}
	if l.RequestsPerUnit == 0 {
		return l, nil // refuses every request, like a configured 0
	}
	r, err := rules.NewEnvoyRule(id, dom.Algorithm, l.RequestsPerUnit, period)
	if err != nil {
		return nil, grpcerr.Invalid(field+".requests_per_unit", "%v", err)
	}
	l.Rule = r
	return l, nil
}

// replace drops the limits that another matched limit replaces, as
// envoyproxy/ratelimit does: the replaced limit is neither checked nor
// charged.
func replace(checks []check) {
	var replaced map[string]bool
	for _, c := range checks {
		if c.limit == nil {
			continue
		}
		for _, name := range c.limit.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[name] = true
		}
	}
	for i := range checks {
		c := &checks[i]
		if c.limit != nil && c.limit.Name != "" && replaced[c.limit.Name] {
			c.limit, c.replaced = nil, true
		}
	}
}

// storeKey is the key a descriptor is counted under within its rule: its
// entries, "key=value|key=value", with '%', '=' and '|' escaped so that
// distinct entries never meet. Where shared (rules.EnvoyLimit.Shared)
// names a pattern, the pattern stands for the value, so that every value
// it matches counts under one key (share_threshold). A key the store
// would refuse (longer than 512 bytes, or not UTF-8) is hashed.
func storeKey(entries []*ratelimitpb.RateLimitDescriptor_Entry, shared []string) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		escapeTo(&b, e.GetKey())
		b.WriteByte('=')
		if i < len(shared) && shared[i] != "" {
			escapeTo(&b, shared[i])
		} else {
			escapeTo(&b, e.GetValue())
		}
	}
	k := b.String()
	if len(k) > maxKeyBytes || !utf8.ValidString(k) {
		sum := sha256.Sum256([]byte(k))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '=', '|':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

// clampUint32 fits a count into the proto's uint32 fields.
func clampUint32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
