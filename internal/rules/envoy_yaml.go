package rules

import (
	"crypto/sha256"
	"encoding/hex"
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
