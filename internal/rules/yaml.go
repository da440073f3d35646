package rules

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads and validates a rules file. Errors name the file, the line, the
// rule and the field.
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return Parse(path, data)
}

//go:embed example.yaml
var exampleYAML []byte

// ExampleYAML is the built-in rule set the allocator serves when it is given
// no rules file; docs/configuration.md shows it.
func ExampleYAML() []byte { return bytes.Clone(exampleYAML) }

// Example returns the built-in rule set.
func Example() *Set {
	s, err := Parse("built-in example", exampleYAML)
	if err != nil {
		panic("rules: the built-in example is invalid: " + err.Error()) // caught by TestExampleIsValid
	}
	return s
}

// Parse validates a rules document; file names it in errors. The file is
// one YAML document holding one non-empty rules list, an envoy section
// (envoy_yaml.go), or both: nothing in it may be silently ignored, and a
// reload cannot leave every rule unknown by accident.
func Parse(file string, data []byte) (*Set, error) {
	docs, err := decodeAll(data)
	if err != nil {
		return nil, syntaxError(file, data, err)
	}
	if len(docs) == 0 {
		return nil, &FieldError{File: file, Field: "rules", Msg: "the file is empty"}
	}
	if len(docs) > 1 {
		return nil, &FieldError{File: file, Line: docs[1].Line, Field: "rules",
			Msg: "a second YAML document: the file must hold one"}
	}
	doc := docs[0]
	p := parser{file: file}
	list, envoyNode, err := p.document(doc)
	if err != nil {
		return nil, err
	}
	set, err := NewSet(list)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File = file
			fe.Line = p.lineOf(fe)
		}
		return nil, err
	}
	if envoyNode != nil {
		if set.envoy, err = p.envoy(envoyNode, set); err != nil {
			return nil, err
		}
		set.version = set.hash()
	}
	return set, nil
}

type parser struct {
	file  string
	lines map[string]int // "rule\x00field" -> line, for errors found by Normalize
}

func (p *parser) fail(n *yaml.Node, rule, field, format string, args ...any) error {
	return &FieldError{File: p.file, Line: n.Line, Rule: rule, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// lineOf is the line of the field an error names, or of the nearest field
// around it that the file holds ("overrides[2]" for a missing
// "overrides[2].limit"), or of the rule.
func (p *parser) lineOf(fe *FieldError) int {
	field := fe.Field
	for field != "" {
		if l, ok := p.lines[fe.Rule+"\x00"+field]; ok {
			return l
		}
		i := strings.LastIndexByte(field, '.')
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return p.lines[fe.Rule+"\x00"]
}

// document reads the top level: the rules list and the envoy section
// (envoy_yaml.go), returned unparsed. The rules list may be left out only
// when an envoy section is given.
func (p *parser) document(doc *yaml.Node) ([]Rule, *yaml.Node, error) {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = deref(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, p.fail(root, "", "rules", "the file must be a mapping with a 'rules' list")
	}
	var seq, envoy *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := deref(root.Content[i]), deref(root.Content[i+1])
		var slot **yaml.Node
		switch k.Value {
		case "rules":
			slot = &seq
		case "envoy":
			slot = &envoy
		default:
			return nil, nil, p.fail(k, "", fieldName(k.Value), "unknown top-level field (the file holds 'rules' and 'envoy')")
		}
		if *slot != nil {
			return nil, nil, p.fail(k, "", k.Value, "given twice")
		}
		*slot = v
	}
	p.lines = make(map[string]int)
	if seq == nil && envoy != nil {
		return nil, envoy, nil
	}
	if seq == nil {
		return nil, nil, p.fail(root, "", "rules", "missing")
	}
	if seq.Kind != yaml.SequenceNode {
		return nil, nil, p.fail(seq, "", "rules", "must be a list of rules")
	}
	if len(seq.Content) == 0 {
		return nil, nil, p.fail(seq, "", "rules", "must hold at least one rule")
	}
	out := make([]Rule, 0, len(seq.Content))
	for i, item := range seq.Content {
		r, err := p.rule(i, deref(item))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, r)
	}
	return out, envoy, nil
}

func (p *parser) rule(index int, n *yaml.Node) (Rule, error) {
	var r Rule
	label := fmt.Sprintf("#%d", index+1)
	if n.Kind != yaml.MappingNode {
		return r, p.fail(n, label, "", "must be a mapping of fields") // no field: the whole rule
	}
	// The name first, so every later error can name the rule.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if deref(n.Content[i]).Value == "name" {
			r.Name = deref(n.Content[i+1]).Value
			if r.Name != "" {
				label = quoteName(r.Name)
			}
		}
	}
	p.lines[label+"\x00"] = n.Line
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if seen[k.Value] {
			return r, p.fail(k, label, fieldName(k.Value), "given twice")
		}
		seen[k.Value] = true
		p.lines[label+"\x00"+k.Value] = k.Line
		if err := p.field(&r, label, k.Value, v); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (p *parser) field(r *Rule, label, name string, v *yaml.Node) error {
	var err error
	switch name {
	case "name":
		if v.Kind != yaml.ScalarNode {
			err = errors.New("must be a string")
		}
	case "algorithm":
		r.Algorithm, err = ParseAlgorithm(v.Value)
	case "limit":
		r.Limit, err = scalarInt(v)
	case "period":
		if u, ok := parseCalendarUnit(v.Value); ok && v.Kind == yaml.ScalarNode {
			r.Calendar.Unit = u
			break
		}
		if r.Period, err = scalarDuration(v); err != nil {
			err = fmt.Errorf("%v, or a calendar period: day, week, month or year", err)
		}
	case "time_zone":
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			err = errors.New("must be an IANA time zone name such as Europe/Paris")
		}
		r.Calendar.Zone = v.Value
	case "burst":
		r.Burst, err = scalarInt(v)
	case "max_debt":
		var n int64
		n, err = scalarInt(v)
		r.MaxDebt = &n
	case "max_hold":
		r.MaxHold, err = scalarDuration(v)
	case "scope":
		if v.Kind != yaml.ScalarNode {
			err = errors.New("must be regional or global")
			break
		}
		r.Scope, err = ParseScope(v.Value)
	case "failure":
		r.Failure, err = parseFailure(v.Value)
	case "strict":
		r.Strict, err = strconv.ParseBool(v.Value)
	case "shadow":
		r.Shadow, err = strconv.ParseBool(v.Value)
	case "lease":
		return p.lease(&r.Lease, label, v)
	case "overrides":
		return p.overrides(r, label, v)
	default:
		err = errors.New("unknown field (name, algorithm, limit, period, time_zone, burst, max_debt, max_hold, scope, failure, strict, shadow, lease, overrides)")
	}
	if err != nil {
		return p.fail(v, label, fieldName(name), "%v", err)
	}
	return nil
}

func (p *parser) lease(l *LeaseTuning, label string, n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return p.fail(n, label, "lease", "must be a mapping (min, max, ttl, refresh)")
	}
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		field := "lease." + k.Value
		if seen[field] {
			return p.fail(k, label, fieldName(field), "given twice")
		}
		seen[field] = true
		p.lines[label+"\x00"+field] = k.Line
		var err error
		switch k.Value {
		case "min":
			l.Min, err = scalarInt(v)
		case "max":
			l.Max, err = scalarInt(v)
		case "ttl":
			l.TTL, err = scalarDuration(v)
		case "refresh":
			l.Refresh, err = scalarDuration(v)
		default:
			err = errors.New("unknown field (min, max, ttl, refresh)")
		}
		if err != nil {
			return p.fail(v, label, fieldName(field), "%v", err)
		}
	}
	return nil
}

// overrides reads a rule's overrides: a list of mappings of key or match,
// limit and burst. Normalize checks what they say.
func (p *parser) overrides(r *Rule, label string, n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return p.fail(n, label, "overrides", "must be a list of overrides (key or match, limit, burst)")
	}
	if len(n.Content) > MaxOverrides {
		return p.fail(n, label, "overrides", "holds %d overrides, at most %d", len(n.Content), MaxOverrides)
	}
	r.Overrides = make([]Override, len(n.Content))
	for i, item := range n.Content {
		item = deref(item)
		field := fmt.Sprintf("overrides[%d]", i)
		p.lines[label+"\x00"+field] = item.Line
		if item.Kind != yaml.MappingNode {
			return p.fail(item, label, field, "must be a mapping (key or match, limit, burst)")
		}
		o := &r.Overrides[i]
		seen := make(map[string]bool)
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := deref(item.Content[j]), deref(item.Content[j+1])
			sub := field + "." + k.Value
			if seen[k.Value] {
				return p.fail(k, label, fieldName(sub), "given twice")
			}
			seen[k.Value] = true
			p.lines[label+"\x00"+sub] = k.Line
			var err error
			switch k.Value {
			case "key", "match":
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					err = errors.New("must be a non-empty string")
				} else if k.Value == "key" {
					o.Key = v.Value
				} else {
					o.Match = v.Value
				}
			case "limit":
				o.Limit, err = scalarInt(v)
			case "burst":
				o.Burst, err = scalarInt(v)
			default:
				err = errors.New("unknown field (key, match, limit, burst)")
			}
			if err != nil {
				return p.fail(v, label, fieldName(sub), "%v", err)
			}
		}
	}
	return nil
}

// deref is the node an alias stands for; any other node is itself. An
// alias node's Value is its anchor's name, never to be read as the value.
// yaml.v3 keeps an alias as a pointer to the anchored node, not a copy, so
// following one costs nothing and a "billion laughs" document stays as
// small as its text. An alias cannot be anchored, so one step is enough.
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// plainField is a field's name as Allot spells them: "limit", "lease.ttl".
var plainField = regexp.MustCompile(`^[A-Za-z0-9_-]+(\[[0-9]+\])?(\.[A-Za-z0-9_-]+(\[[0-9]+\])?)*$`)

// fieldName is how an error names a field of the file: as it is, or quoted
// when the file spells it oddly (empty, or with spaces or a line break) so
// that the error stays one readable line.
func fieldName(s string) string {
	if plainField.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

func scalarInt(v *yaml.Node) (int64, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, errors.New("must be a whole number")
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("must be a whole number, got %q", v.Value)
	}
	if n < 0 {
		return 0, fmt.Errorf("must not be negative, got %d", n)
	}
	return n, nil
}

func scalarDuration(v *yaml.Node) (time.Duration, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, errors.New("must be a duration such as 1s, 1m or 1h")
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as 1s, 1m or 1h, got %q", v.Value)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %v", d)
	}
	return d, nil
}

func parseFailure(s string) (Failure, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("must be open or closed, got %q", s)
}
