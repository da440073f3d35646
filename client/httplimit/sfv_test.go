package httplimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// This file is a strict parser of structured-field Lists (RFC 9651, which
// RFC 8941 became), for the tests to check what the middleware writes. It
// follows the parsing algorithm of §4.2, and refuses what a recipient
// would: the fields must parse, not merely look right.

// sfMember is one member of a List: a bare item, or an inner list.
type sfMember struct {
	item   any // int64, string (a String), sfToken, bool, []byte, or []sfMember for an inner list
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type sfToken string

// param returns the value of the last parameter named key, as a
// recipient reads a duplicated one.
func (m sfMember) param(key string) (any, bool) {
	var v any
	found := false
	for _, p := range m.params {
		if p.key == key {
			v, found = p.value, true
		}
	}
	return v, found
}

// parseSFList parses a field value as a List.
func parseSFList(field string) ([]sfMember, error) {
	p := &sfParser{s: strings.TrimLeft(field, " ")}
	p.s = strings.TrimRight(p.s, " ")
	var list []sfMember
	for p.s != "" {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		list = append(list, m)
		p.ows()
		if p.s == "" {
			return list, nil
		}
		if p.s[0] != ',' {
			return nil, fmt.Errorf("want ',' after a member, got %q", p.s)
		}
		p.s = p.s[1:]
		p.ows()
		if p.s == "" {
			return nil, fmt.Errorf("a trailing comma")
		}
	}
	return list, nil
}

type sfParser struct{ s string }

func (p *sfParser) ows() { p.s = strings.TrimLeft(p.s, " \t") }

func (p *sfParser) member() (sfMember, error) {
	var m sfMember
	var err error
	if strings.HasPrefix(p.s, "(") {
		m.item, err = p.innerList()
	} else {
		m.item, err = p.bareItem()
	}
	if err != nil {
		return m, err
	}
	m.params, err = p.parameters()
	return m, err
}

func (p *sfParser) innerList() ([]sfMember, error) {
	p.s = p.s[1:]
	var items []sfMember
	for {
		p.s = strings.TrimLeft(p.s, " ")
		if strings.HasPrefix(p.s, ")") {
			p.s = p.s[1:]
			return items, nil
		}
		item, err := p.bareItem()
		if err != nil {
			return nil, err
		}
		params, err := p.parameters()
		if err != nil {
			return nil, err
		}
		items = append(items, sfMember{item: item, params: params})
		if p.s == "" || p.s[0] != ' ' && p.s[0] != ')' {
			return nil, fmt.Errorf("an inner list's items need a space between them, got %q", p.s)
		}
	}
}

func (p *sfParser) parameters() ([]sfParam, error) {
	var params []sfParam
	for strings.HasPrefix(p.s, ";") {
		p.s = strings.TrimLeft(p.s[1:], " ")
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var value any = true
		if strings.HasPrefix(p.s, "=") {
			p.s = p.s[1:]
			if value, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		params = append(params, sfParam{key, value})
	}
	return params, nil
}

func (p *sfParser) key() (string, error) {
	if p.s == "" || !(isLower(p.s[0]) || p.s[0] == '*') {
		return "", fmt.Errorf("a key must start with a-z or '*', got %q", p.s)
	}
	i := 1
	for i < len(p.s) && (isLower(p.s[i]) || isDigit(p.s[i]) || strings.IndexByte("_-.*", p.s[i]) >= 0) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.s == "" {
		return nil, fmt.Errorf("an item is missing")
	}
	switch c := p.s[0]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		return p.binary()
	case c == '?':
		return p.boolean()
	case isAlpha(c) || c == '*':
		return p.token(), nil
	}
	return nil, fmt.Errorf("no item starts with %q", p.s)
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, '.', 1 to 3 digits).
func (p *sfParser) number() (any, error) {
	i := 0
	if p.s[0] == '-' {
		i++
	}
	start, dot := i, -1
	for i < len(p.s) && (isDigit(p.s[i]) || p.s[i] == '.' && dot < 0) {
		if p.s[i] == '.' {
			dot = i
		}
		i++
	}
	text := p.s[:i]
	digits := i - start
	p.s = p.s[i:]
	switch {
	case digits == 0 || dot == start:
		return nil, fmt.Errorf("a number without digits: %q", text)
	case dot < 0:
		if digits > 15 {
			return nil, fmt.Errorf("an Integer of more than 15 digits: %q", text)
		}
		n, err := strconv.ParseInt(text, 10, 64)
		return n, err
	case dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3:
		return nil, fmt.Errorf("a Decimal out of shape: %q", text)
	}
	f, err := strconv.ParseFloat(text, 64)
	return f, err
}

func (p *sfParser) str() (string, error) {
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c == '\\':
			i++
			if i == len(p.s) || p.s[i] != '"' && p.s[i] != '\\' {
				return "", fmt.Errorf("a String escapes something else than '\"' or '\\\\'")
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("a String holds byte %#x", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("a String is not closed")
}

func (p *sfParser) token() sfToken {
	i := 1
	for i < len(p.s) && (isTchar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	t := sfToken(p.s[:i])
	p.s = p.s[i:]
	return t
}

func (p *sfParser) binary() ([]byte, error) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return nil, fmt.Errorf("a Byte Sequence is not closed")
	}
	b64 := p.s[1 : 1+end]
	for i := 0; i < len(b64); i++ {
		if c := b64[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return nil, fmt.Errorf("a Byte Sequence holds %q", c)
		}
	}
	p.s = p.s[2+end:]
	return []byte(b64), nil
}

func (p *sfParser) boolean() (bool, error) {
	if len(p.s) < 2 || p.s[1] != '0' && p.s[1] != '1' {
		return false, fmt.Errorf("a Boolean is ?0 or ?1, got %q", p.s)
	}
	v := p.s[1] == '1'
	p.s = p.s[2:]
	return v, nil
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// The checker itself: RFC 9651's examples and its edge cases.
func TestParseSFList(t *testing.T) {
	good := map[string]int{
		`"burst";q=10;w=1, "hourly";q=1000;w=3600`: 2,
		`"a";r=0;t=1800`:  1,
		`sugar, tea, rum`: 3,
		`abc;a=1;b=2; cde_456, (ghi;jk=4 l);q="9";r=w`:                                   2,
		`("foo" "bar"), ("baz"), ("bat" "one"), ()`:                                      4,
		`1;a=-999999999999999, 4.5;b=?0, :cHJldGVuZCB0aGlzIGlzIGJpbmFyeSBjb250ZW50Lg==:`: 3,
		`"\"\\"`:  1,
		``:        0,
		`  "x"  `: 1,
	}
	for in, n := range good {
		list, err := parseSFList(in)
		if err != nil || len(list) != n {
			t.Errorf("parseSFList(%q) = %d members, %v; want %d", in, len(list), err, n)
		}
	}
	for _, in := range []string{
		`"a",`, `,"a"`, `"a" "b"`, `"a";Q=1`, `"a";q=`, `"a";q=1000000000000000`, `"a";q=-1000000000000000`,
		`"a";t=1.`, `"a";t=1.2345`, `"a";t=1234567890123.0`, `"a\nb"`, `"a\x"`, `"é"`, `"open`, "\"a\x01\"", `"a";q=--1`,
		`"a"x`, `?2`, `:a b:`, `(1 2`, `(1,2)`, `"a";`, `-`, `"a";q=1,,"b"`,
	} {
		if list, err := parseSFList(in); err == nil {
			t.Errorf("parseSFList(%q) = %v, want an error", in, list)
		}
	}
	list, _ := parseSFList(`"a";q=1;q=2;w`)
	if v, _ := list[0].param("q"); v != int64(2) {
		t.Errorf("duplicated parameter q = %v, want the last one, 2", v)
	}
	if v, _ := list[0].param("w"); v != true {
		t.Errorf("a parameter with no value = %v, want true", v)
	}
}
