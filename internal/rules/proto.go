package rules

import (
	"fmt"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

var algorithmToProto = map[Algorithm]allotv1.Algorithm{
	TokenBucket:   allotv1.Algorithm_ALGORITHM_TOKEN_BUCKET,
	FixedWindow:   allotv1.Algorithm_ALGORITHM_FIXED_WINDOW,
	SlidingWindow: allotv1.Algorithm_ALGORITHM_SLIDING_WINDOW,
	SlidingLog:    allotv1.Algorithm_ALGORITHM_SLIDING_LOG,
	Concurrency:   allotv1.Algorithm_ALGORITHM_CONCURRENCY,
}

// ToProto is the wire form of the set, as GetRules returns it.
func (s *Set) ToProto() *allotv1.GetRulesResponse {
	out := &allotv1.GetRulesResponse{Version: s.version}
	for _, r := range s.list {
		failure := allotv1.Failure_FAILURE_OPEN
		if r.Failure == FailClosed {
			failure = allotv1.Failure_FAILURE_CLOSED
		}
		pr := &allotv1.Rule{
			Name:      r.Name,
			Algorithm: algorithmToProto[r.Algorithm],
			Limit:     r.Limit,
			Period:    durationpb.New(r.Period),
			Burst:     r.Burst,
			Failure:   failure,
			Strict:    r.Strict,
			Shadow:    r.Shadow,
			Overrides: overridesToProto(r.Overrides),
			MaxDebt:   r.MaxDebt,
			Lease: &allotv1.LeaseTuning{
				Min:     r.Lease.Min,
				Max:     r.Lease.Max,
				Ttl:     durationpb.New(r.Lease.TTL),
				Refresh: durationpb.New(r.Lease.Refresh),
			},
		}
		if r.MaxHold != 0 {
			pr.MaxHold = durationpb.New(r.MaxHold)
		}
		out.Rules = append(out.Rules, pr)
	}
	return out
}

// FromProto rebuilds a set from GetRules, validating it as a file would be.
func FromProto(resp *allotv1.GetRulesResponse) (*Set, error) {
	list := make([]Rule, 0, len(resp.GetRules()))
	for i, pr := range resp.GetRules() {
		r := Rule{
			Name:   pr.GetName(),
			Limit:  pr.GetLimit(),
			Period: pr.GetPeriod().AsDuration(),
			Burst:  pr.GetBurst(),
			Strict: pr.GetStrict(),
			Shadow: pr.GetShadow(),
			// An allocator before the field gives none: the default.
			MaxDebt: copyDebt(pr.MaxDebt),
			MaxHold: pr.GetMaxHold().AsDuration(),
			Lease: LeaseTuning{
				Min:     pr.GetLease().GetMin(),
				Max:     pr.GetLease().GetMax(),
				TTL:     pr.GetLease().GetTtl().AsDuration(),
				Refresh: pr.GetLease().GetRefresh().AsDuration(),
			},
		}
		for _, o := range pr.GetOverrides() {
			r.Overrides = append(r.Overrides, Override{Key: o.GetKey(), Match: o.GetMatch(), Limit: o.GetLimit(), Burst: o.GetBurst()})
		}
		for a, p := range algorithmToProto {
			if p == pr.GetAlgorithm() {
				r.Algorithm = a
			}
		}
		switch pr.GetFailure() {
		case allotv1.Failure_FAILURE_OPEN:
			r.Failure = FailOpen
		case allotv1.Failure_FAILURE_CLOSED:
			r.Failure = FailClosed
		}
		if r.Algorithm == 0 {
			return nil, fmt.Errorf("rules[%d] %q: algorithm %v is not known to this client", i, r.Name, pr.GetAlgorithm())
		}
		list = append(list, r)
	}
	s, err := NewSet(list)
	if err != nil {
		return nil, fmt.Errorf("rules from the allocator: %w", err)
	}
	return s, nil
}

func overridesToProto(os []Override) []*allotv1.KeyOverride {
	if len(os) == 0 {
		return nil
	}
	out := make([]*allotv1.KeyOverride, len(os))
	for i, o := range os {
		out[i] = &allotv1.KeyOverride{Key: o.Key, Match: o.Match, Limit: o.Limit, Burst: o.Burst}
	}
	return out
}
