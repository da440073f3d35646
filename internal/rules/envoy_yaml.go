package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The envoy section of a rules file:
//
//	envoy:
//	  headers: x-ratelimit          # none (default), x-ratelimit or ratelimit
//	  domains:
//	    - domain: messaging
//	      algorithm: fixed_window   # the domain's default; fixed_window if left out
//	      descriptors:
//	        - key: message_type
//	          value: marketing
//	          descriptors:
//	            - key: to_number
//	              rate_limit: { unit: day, requests_per_unit: 5 }
//	        - key: to_number
//	          rate_limit: { unit: day, requests_per_unit: 100 }
//
// Each domain is an envoyproxy/ratelimit config file, with the same
// fields, plus rate_limit.algorithm. Errors name the file, the line, the
// generated rule (once the descriptor's key is known) and the field by its
// path, e.g. envoy.domains[0].descriptors[1].rate_limit.unit.

// envoyParse is the state of parsing one envoy section.
type envoyParse struct {
	p      *parser
	set    *Set              // the rules parsed before, whose names are taken
	names  map[string]string // generated rule name -> field of its descriptor
	digest hash.Hash
}

// envoyField is one field of a YAML mapping, with its key node for errors.
type envoyField struct {
	key, value *yaml.Node
}

// fields reads a mapping's fields, refusing duplicates and any field not
// in allowed.
func (ep *envoyParse) fields(n *yaml.Node, rule, path, allowed string) (map[string]envoyField, error) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return nil, ep.p.fail(n, rule, path, "must be a mapping (%s)", allowed)
	}
	ok := strings.Split(allowed, ", ")
	out := make(map[string]envoyField, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		field := join(path, fieldName(k.Value))
		if why, known := envoyUnsupported[k.Value]; known && !contains(ok, k.Value) {
			return nil, ep.p.fail(k, rule, field, "%s", why)
		}
		if !contains(ok, k.Value) {
			return nil, ep.p.fail(k, rule, field, "unknown field (%s)", allowed)
		}
		if _, dup := out[k.Value]; dup {
			return nil, ep.p.fail(k, rule, field, "given twice")
		}
		out[k.Value] = envoyField{k, v}
	}
	return out, nil
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// envoy parses the section; set holds the rules parsed before it.
func (p *parser) envoy(n *yaml.Node, set *Set) (*Envoy, error) {
	ep := &envoyParse{p: p, set: set, names: make(map[string]string), digest: sha256.New()}
	f, err := ep.fields(n, "", "envoy", "headers, domains")
	if err != nil {
		return nil, err
	}
	e := &Envoy{domains: make(map[string]*EnvoyDomain)}
	if h, ok := f["headers"]; ok {
		v, known := envoyHeaderNames[h.value.Value]
		if h.value.Kind != yaml.ScalarNode || !known {
			return nil, p.fail(h.value, "", "envoy.headers", "must be none, x-ratelimit or ratelimit, got %q", h.value.Value)
		}
		e.Headers = v
	}
	fmt.Fprintf(ep.digest, "headers %d\n", e.Headers)
	d, ok := f["domains"]
	switch {
	case !ok:
		return nil, p.fail(n, "", "envoy.domains", "missing")
	case d.value.Kind != yaml.SequenceNode:
		return nil, p.fail(d.value, "", "envoy.domains", "must be a list of domains")
	case len(d.value.Content) == 0:
		return nil, p.fail(d.value, "", "envoy.domains", "must hold at least one domain")
	}
	lines := make(map[string]int)
	for i, dn := range d.value.Content {
		dn = deref(dn)
		path := fmt.Sprintf("envoy.domains[%d]", i)
		dom, err := ep.domain(path, dn)
		if err != nil {
			return nil, err
		}
		if line, dup := lines[dom.Name]; dup {
			return nil, p.fail(dn, "", join(path, "domain"), "domain %q is given twice (also at line %d)", dom.Name, line)
		}
		lines[dom.Name] = dn.Line
		e.domains[dom.Name] = dom
		e.order = append(e.order, dom.Name)
	}
	e.digest = hex.EncodeToString(ep.digest.Sum(nil))
	return e, nil
}

// domain parses one domain and checks that what its limits replace exists.
func (ep *envoyParse) domain(path string, n *yaml.Node) (*EnvoyDomain, error) {
	f, err := ep.fields(n, "", path, "domain, algorithm, descriptors")
	if err != nil {
		return nil, err
	}
	name, ok := f["domain"]
	if !ok || name.value.Kind != yaml.ScalarNode || name.value.Value == "" {
		return nil, ep.p.fail(n, "", join(path, "domain"), "is required: a non-empty string")
	}
	dom := &EnvoyDomain{Name: name.value.Value, Algorithm: FixedWindow}
	if a, ok := f["algorithm"]; ok {
		if dom.Algorithm, err = ParseAlgorithm(a.value.Value); err != nil {
			return nil, ep.p.fail(a.value, "", join(path, "algorithm"), "%v", err)
		}
	}
	fmt.Fprintf(ep.digest, "domain %q %s\n", dom.Name, dom.Algorithm)
	dp := &domainParse{envoyParse: ep, dom: dom, named: make(map[string]bool)}
	if d, ok := f["descriptors"]; ok {
		if err := dp.level(join(path, "descriptors"), d.value, &dom.root, nil); err != nil {
			return nil, err
		}
	}
	for _, r := range dp.replaces {
		if !dp.named[r.name] {
			return nil, ep.p.fail(r.node, r.rule, r.field, "no rate_limit of domain %q is named %q", dom.Name, r.name)
		}
	}
	return dom, nil
}

// domainParse is the state of parsing one domain.
type domainParse struct {
	*envoyParse
	dom      *EnvoyDomain
	named    map[string]bool // rate_limit names
	replaces []pendingReplace
}

// pendingReplace is a replaces entry, checked once the domain is read.
type pendingReplace struct {
	node        *yaml.Node
	rule, field string
	name        string
}

// level parses a list of descriptors into l; path leads to it.
func (dp *domainParse) level(field string, n *yaml.Node, l *envoyNode, path []EnvoyEntry) error {
	if n.Kind != yaml.SequenceNode {
		return dp.p.fail(n, "", field, "must be a list of descriptors")
	}
	lines := make(map[envoyPair]int) // "key\x00value" -> line, for duplicates
	for i, dn := range n.Content {
		dn = deref(dn)
		f := fmt.Sprintf("%s[%d]", field, i)
		d, entry, err := dp.descriptor(f, dn, path)
		if err != nil {
			return err
		}
		id := envoyPair{entry.Key, entry.Value}
		if line, dup := lines[id]; dup {
			return dp.p.fail(dn, "", f, "descriptor %s is given twice at this level (also at line %d)", describe(entry), line)
		}
		lines[id] = dn.Line
		switch {
		case d.pattern:
			l.patterns = append(l.patterns, d)
		case d.value == "":
			if l.anyValue == nil {
				l.anyValue = make(map[string]*envoyDescriptor)
			}
			l.anyValue[d.key] = d
		default:
			if l.exact == nil {
				l.exact = make(map[envoyPair]*envoyDescriptor)
			}
			l.exact[envoyPair{d.key, d.value}] = d
		}
	}
	return nil
}

func describe(e EnvoyEntry) string {
	if e.Value == "" {
		return strconv.Quote(e.Key)
	}
	return strconv.Quote(e.Key + "=" + e.Value)
}

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
