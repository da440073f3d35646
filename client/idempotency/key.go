package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// parseKey reads the key from the request's header fields named name. The
// draft makes the field a structured-field String ("..."); a bare token
// is taken too, as most clients send one. ok false: no such field. A
// field present but unusable is an error that names the field and says
// what is wrong with it.
func parseKey(h http.Header, name string, maxLen int) (key string, ok bool, err error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fmt.Errorf("the %s header appears %d times; send it once", name, len(vs))
	}
	v := strings.TrimSpace(vs[0])
	if strings.HasPrefix(v, `"`) {
		if v, err = unquote(v); err != nil {
			return "", true, fmt.Errorf("the %s header is not a valid quoted string: %w", name, err)
		}
	} else if i := strings.IndexFunc(v, func(c rune) bool { return c <= ' ' || c > '~' || c == '"' }); i >= 0 {
		return "", true, fmt.Errorf("the %s header holds %q at byte %d; a key is printable ASCII, quoted when it holds spaces", name, v[i], i)
	}
	switch {
	case v == "":
		return "", true, fmt.Errorf("the %s header is empty", name)
	case len(v) > maxLen:
		return "", true, fmt.Errorf("the %s header is %d bytes long; at most %d are allowed", name, len(v), maxLen)
	}
	return v, true, nil
}

// unquote reads a structured-field String (RFC 9651 §4.2.5): quoted,
// printable ASCII, with only \" and \\ escaped.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", errors.New("no closing quote")
	}
	s = s[1 : len(s)-1]
	if !strings.ContainsAny(s, `"\`) {
		if i := strings.IndexFunc(s, func(c rune) bool { return c < ' ' || c > '~' }); i >= 0 {
			return "", fmt.Errorf("byte %d is not printable ASCII", i+1)
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", fmt.Errorf("byte %d: a backslash escapes only \" and \\", i+1)
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			return "", fmt.Errorf("byte %d: a quote inside the string is not escaped", i+1)
		case c < ' ' || c > '~':
			return "", fmt.Errorf("byte %d is not printable ASCII", i+1)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// storeKey is the store's key for an Idempotency-Key within a scope:
// hashed, so that it is bounded whatever the scope holds, and so that no
// choice of scope and key can spell another pair's.
func storeKey(prefix, scope, key string) string {
	var buf [256]byte // on the stack for most scopes and keys
	sum := sha256.Sum256(appendField(appendField(buf[:0], scope), key))
	out := make([]byte, 0, len(prefix)+hex.EncodedLen(len(sum)))
	return string(hex.AppendEncode(append(out, prefix...), sum[:]))
}

// errBodyTooLarge: the request body is over Options.MaxRequestBytes.
var errBodyTooLarge = errors.New("request body too large")

// fingerprint tells one request from another for a key: the method, the
// path and query, the headers named (canonical names) and a hash of the
// body. It reads the body, at most max bytes, and puts it back in r for
// the handler.
func fingerprint(r *http.Request, headers []string, max int64) (string, error) {
	var buf [512]byte // on the stack for most requests
	b := appendField(buf[:0], r.Method)
	b = appendField(b, r.URL.RequestURI())
	for _, name := range headers {
		b = appendField(b, name)
		vs := r.Header[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, v)
		}
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		if body, err = readBody(r.Body, r.ContentLength, max); err != nil {
			return "", err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	bodySum := sha256.Sum256(body)
	sum := sha256.Sum256(append(b, bodySum[:]...))
	return hex.EncodeToString(sum[:]), nil
}

// readBody reads all of body, failing with errBodyTooLarge past max. The
// original body is closed: the handler reads the copy.
func readBody(body io.ReadCloser, length, max int64) ([]byte, error) {
	defer body.Close()
	if length > max {
		return nil, errBodyTooLarge
	}
	var buf bytes.Buffer
	if length > 0 {
		buf.Grow(int(length))
	}
	if _, err := buf.ReadFrom(io.LimitReader(body, max+1)); err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if int64(buf.Len()) > max {
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

// appendField appends s with its length, so that fields cannot run into
// one another ("ab"+"c" is not "a"+"bc").
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
