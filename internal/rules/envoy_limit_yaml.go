package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// descriptor parses one descriptor and what is nested in it.
func (dp *domainParse) descriptor(field string, n *yaml.Node, parent []EnvoyEntry) (*envoyDescriptor, EnvoyEntry, error) {
	var entry EnvoyEntry
	f, err := dp.fields(n, "", field, "key, value, rate_limit, shadow_mode, quota_mode, share_threshold, detailed_metric, descriptors")
	if err != nil {
		return nil, entry, err
	}
	key, ok := f["key"]
	if !ok || key.value.Kind != yaml.ScalarNode || key.value.Value == "" {
		return nil, entry, dp.p.fail(n, "", field+".key", "is required: a non-empty string")
	}
	entry.Key = key.value.Value
	d := &envoyDescriptor{key: entry.Key}
	if v, ok := f["value"]; ok {
		if v.value.Kind != yaml.ScalarNode || v.value.Value == "" {
			return nil, entry, dp.p.fail(v.value, "", field+".value", "must be a non-empty string (leave it out to match any value)")
		}
		entry.Value = v.value.Value
		d.value, d.pattern = entry.Value, strings.Contains(entry.Value, "*")
	}
	if s, ok := f["share_threshold"]; ok {
		if entry.Shared, err = strconv.ParseBool(s.value.Value); err != nil || s.value.Kind != yaml.ScalarNode {
			return nil, entry, dp.p.fail(s.value, "", field+".share_threshold", "must be true or false, got %q", s.value.Value)
		}
		if entry.Shared && !d.pattern {
			return nil, entry, dp.p.fail(s.key, "", field+".share_threshold", "applies to a value with a '*' (the values it matches share one counter), and this descriptor's value has none")
		}
	}
	path := append(append([]EnvoyEntry(nil), parent...), entry)
	shadow := false
	if s, ok := f["shadow_mode"]; ok {
		if shadow, err = strconv.ParseBool(s.value.Value); err != nil || s.value.Kind != yaml.ScalarNode {
			return nil, entry, dp.p.fail(s.value, "", field+".shadow_mode", "must be true or false, got %q", s.value.Value)
		}
		if _, ok := f["rate_limit"]; !ok && shadow {
			return nil, entry, dp.p.fail(s.key, "", field+".shadow_mode", "applies to a rate_limit, and this descriptor has none")
		}
	}
	quota := false
	if q, ok := f["quota_mode"]; ok {
		if quota, err = strconv.ParseBool(q.value.Value); err != nil || q.value.Kind != yaml.ScalarNode {
			return nil, entry, dp.p.fail(q.value, "", field+".quota_mode", "must be true or false, got %q", q.value.Value)
		}
		if _, ok := f["rate_limit"]; !ok && quota {
			return nil, entry, dp.p.fail(q.key, "", field+".quota_mode", "applies to a rate_limit, and this descriptor has none")
		}
		if quota && shadow {
			return nil, entry, dp.p.fail(q.key, "", field+".quota_mode", "and shadow_mode: a limit is one or the other (shadow never refuses; quota refuses once every quota limit of a request is exceeded)")
		}
	}
	if m, ok := f["detailed_metric"]; ok { // accepted: metrics never carry values here
		if _, err := strconv.ParseBool(m.value.Value); err != nil || m.value.Kind != yaml.ScalarNode {
			return nil, entry, dp.p.fail(m.value, "", field+".detailed_metric", "must be true or false, got %q", m.value.Value)
		}
	}
	if r, ok := f["rate_limit"]; ok {
		if d.limit, err = dp.limit(field+".rate_limit", r.value, path, shadow, quota); err != nil {
			return nil, entry, err
		}
	}
	if c, ok := f["descriptors"]; ok {
		if err := dp.level(field+".descriptors", c.value, &d.children, path); err != nil {
			return nil, entry, err
		}
	}
	return d, entry, nil
}

// limit parses a rate_limit and makes its rule.
func (dp *domainParse) limit(field string, n *yaml.Node, path []EnvoyEntry, shadow, quota bool) (*EnvoyLimit, error) {
	f, err := dp.fields(n, "", field, "unit, requests_per_unit, unit_multiplier, unlimited, name, replaces, algorithm")
	if err != nil {
		return nil, err
	}
	l := &EnvoyLimit{Path: pathString(path), Shadow: shadow, Quota: quota, UnitMultiplier: 1, Shared: sharedPatterns(path)}
	if u, ok := f["unlimited"]; ok {
		if l.Unlimited, err = strconv.ParseBool(u.value.Value); err != nil || u.value.Kind != yaml.ScalarNode {
			return nil, dp.p.fail(u.value, "", field+".unlimited", "must be true or false, got %q", u.value.Value)
		}
	}
	alg := dp.dom.Algorithm
	if l.Unlimited {
		for _, name := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm"} {
			if x, ok := f[name]; ok {
				return nil, dp.p.fail(x.key, "", field+"."+name, "an unlimited rate_limit has no %s", name)
			}
		}
	} else if alg, err = dp.counting(field, n, f, l); err != nil {
		return nil, err
	}
	// The name is known once the period is: errors from here on name it.
	id := EnvoyRuleName(dp.dom.Name, "", path, l.Period())
	l.ID = id
	rule := strconv.Quote(id)
	if l.RequestsPerUnit > 0 && !l.Unlimited {
		if l.Rule, err = NewEnvoyRule(id, alg, l.RequestsPerUnit, l.Period()); err != nil {
			return nil, dp.ruleError(err, n, f, rule, field)
		}
	}
	if _, taken := dp.set.Get(id); taken {
		return nil, dp.p.fail(n, rule, field, "the rule made for this limit has the name of a rule in 'rules': rename that rule")
	}
	if other, taken := dp.names[id]; taken {
		return nil, dp.p.fail(n, rule, field, "the rule made for this limit has the name of the one made for %s: change one of them", other)
	}
	dp.names[id] = field
	if err := dp.naming(field, f, l, rule); err != nil {
		return nil, err
	}
	c := *l
	c.Rule = nil // (a pointer: its meaning, not its address)
	fmt.Fprintf(dp.digest, "%s %q %+v %s %s\n", id, dp.dom.Name, c, l.Rule.digest(), alg)
	return l, nil
}

// counting reads how a limited rate_limit counts: unit, requests_per_unit,
// unit_multiplier and algorithm.
func (dp *domainParse) counting(field string, n *yaml.Node, f map[string]envoyField, l *EnvoyLimit) (Algorithm, error) {
	alg := dp.dom.Algorithm
	u, ok := f["unit"]
	if !ok {
		return 0, dp.p.fail(n, "", field+".unit", "is required (second, minute, hour, day, week, month or year), unless unlimited: true")
	}
	var err error
	if l.Unit, err = ParseEnvoyUnit(u.value.Value); err != nil || u.value.Kind != yaml.ScalarNode {
		return 0, dp.p.fail(u.value, "", field+".unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", u.value.Value)
	}
	rpu, ok := f["requests_per_unit"]
	if !ok {
		return 0, dp.p.fail(n, "", field+".requests_per_unit", "is required (0 refuses every request)")
	}
	v, err := strconv.ParseUint(rpu.value.Value, 10, 32)
	if err != nil || rpu.value.Kind != yaml.ScalarNode {
		return 0, dp.p.fail(rpu.value, "", field+".requests_per_unit", "must be a whole number from 0 to %d, got %q", uint32(1<<32-1), rpu.value.Value)
	}
	l.RequestsPerUnit = uint32(v)
	if m, ok := f["unit_multiplier"]; ok {
		most := uint64(MaxPeriod / l.Unit.Duration())
		v, err := strconv.ParseUint(m.value.Value, 10, 32)
		if err != nil || v < 1 || v > most || m.value.Kind != yaml.ScalarNode {
			return 0, dp.p.fail(m.value, "", field+".unit_multiplier", "must be a whole number from 1 to %d (a period of at most %v), got %q", most, MaxPeriod, m.value.Value)
		}
		l.UnitMultiplier = uint32(v)
	}
	if a, ok := f["algorithm"]; ok {
		if alg, err = ParseAlgorithm(a.value.Value); err != nil {
			return 0, dp.p.fail(a.value, "", field+".algorithm", "%v", err)
		}
	}
	return alg, nil
}

// naming reads name and replaces.
func (dp *domainParse) naming(field string, f map[string]envoyField, l *EnvoyLimit, rule string) error {
	if nm, ok := f["name"]; ok {
		if nm.value.Kind != yaml.ScalarNode || nm.value.Value == "" {
			return dp.p.fail(nm.value, rule, field+".name", "must be a non-empty string")
		}
		l.Name = nm.value.Value
		dp.named[l.Name] = true
	}
	r, ok := f["replaces"]
	if !ok {
		return nil
	}
	if r.value.Kind != yaml.SequenceNode || len(r.value.Content) == 0 {
		return dp.p.fail(r.value, rule, field+".replaces", "must be a list of {name: ...}")
	}
	for i, item := range r.value.Content {
		item = deref(item)
		fi := fmt.Sprintf("%s.replaces[%d]", field, i)
		rf, err := dp.fields(item, rule, fi, "name")
		if err != nil {
			return err
		}
		nm, ok := rf["name"]
		if !ok || nm.value.Kind != yaml.ScalarNode || nm.value.Value == "" {
			return dp.p.fail(item, rule, fi+".name", "is required: a non-empty string")
		}
		if nm.value.Value == l.Name {
			return dp.p.fail(nm.value, rule, fi+".name", "a rate_limit cannot replace itself (%q)", l.Name)
		}
		l.Replaces = append(l.Replaces, nm.value.Value)
		dp.replaces = append(dp.replaces, pendingReplace{node: nm.value, rule: rule, field: fi + ".name", name: nm.value.Value})
	}
	return nil
}

// ruleError turns a rule's validation error into one about the rate_limit
// field it came from.
func (dp *domainParse) ruleError(err error, n *yaml.Node, f map[string]envoyField, rule, field string) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return dp.p.fail(n, rule, field, "%v", err)
	}
	name := map[string]string{"limit": "requests_per_unit", "period": "unit", "algorithm": "algorithm"}[fe.Field]
	at := n
	if x, ok := f[name]; ok {
		at = x.value
	} else {
		name = ""
	}
	return dp.p.fail(at, rule, join(field, name), "%s", fe.Msg)
}

// pathString writes a descriptor's path: "message_type=marketing/to_number".
func pathString(path []EnvoyEntry) string {
	parts := make([]string, len(path))
	for i, e := range path {
		parts[i] = e.Key
		if e.Value != "" {
			parts[i] += "=" + e.Value
		}
	}
	return strings.Join(parts, "/")
}

// sharedPatterns is EnvoyLimit.Shared for a limit at the end of path.
func sharedPatterns(path []EnvoyEntry) []string {
	var out []string
	for i, e := range path {
		if e.Shared {
			if out == nil {
				out = make([]string, len(path))
			}
			out[i] = e.Value
		}
	}
	return out
}
