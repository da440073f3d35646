package idempotency

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestBadKeyIs400(t *testing.T) {
	for _, c := range []struct {
		name, value, says string
	}{
		{"empty", "", "is empty"},
		{"empty string", `""`, "is empty"},
		{"too long", strings.Repeat("k", 256), "256 bytes long; at most 255"},
		{"too long quoted", `"` + strings.Repeat("k", 256) + `"`, "256 bytes long"},
		{"unclosed quote", `"abc`, "no closing quote"},
		{"bad escape", `"a\nb"`, "a backslash escapes only"},
		{"inner quote", `"a"b"`, "not escaped"},
		{"space unquoted", "a b", "quoted when it holds spaces"},
		{"control character", "a\x01b", "printable ASCII"},
		{"not ASCII", "clé", "printable ASCII"},
		{"not ASCII quoted", `"clé"`, "not printable ASCII"},
	} {
		svc := &service{}
		h := newMW(t, NewMemoryStore(), Options{}).Wrap(svc)
		r := request("POST", "", "x")
		r.Header["Idempotency-Key"] = []string{c.value}
		w := serve(h, r)
		if w.Code != 400 || !strings.Contains(w.Body.String(), "Idempotency-Key header") || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s: %d %s; want 400 naming the header and saying %q", c.name, w.Code, w.Body, c.says)
		}
		if svc.runs.Load() != 0 {
			t.Errorf("%s: the handler ran", c.name)
		}
	}
	r := request("POST", "", "x")
	r.Header["Idempotency-Key"] = []string{"a", "b"}
	if w := serve(newMW(t, NewMemoryStore(), Options{}).Wrap(&service{}), r); w.Code != 400 || !strings.Contains(w.Body.String(), "appears 2 times") {
		t.Errorf("two keys: %d %s", w.Code, w.Body)
	}
}

func TestKeyForms(t *testing.T) {
	for value, want := range map[string]string{
		"8e03978e-40d5-43e8":     "8e03978e-40d5-43e8",
		`"8e03978e-40d5-43e8"`:   "8e03978e-40d5-43e8",
		`  "a b"  `:              "a b",
		`"a\"b\\c"`:              `a"b\c`,
		strings.Repeat("k", 255): strings.Repeat("k", 255),
	} {
		got, ok, err := parseKey(http.Header{"Idempotency-Key": {value}}, "Idempotency-Key", 255)
		if err != nil || !ok || got != want {
			t.Errorf("parseKey(%q) = %q, %v, %v; want %q", value, got, ok, err, want)
		}
	}
	// The quoted and the bare form of one key are one key.
	svc := &service{}
	h := newMW(t, NewMemoryStore(), Options{}).Wrap(svc)
	serve(h, request("POST", "k-1", "x"))
	serve(h, request("POST", `"k-1"`, "x"))
	wantRuns(t, svc, 1)
}

func TestOptionsErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		opts Options
		says string
	}{
		{Options{}, "exactly one of Store, Redis and RedisURL (0 set)"},
		{Options{Store: NewMemoryStore(), RedisURL: "redis://x"}, "(2 set)"},
		{Options{RedisURL: "http://nope"}, "Options.RedisURL"},
		{Options{Store: NewMemoryStore(), TTL: -time.Second}, "TTL is -1s"},
		{Options{Store: NewMemoryStore(), MaxResponseBytes: -1}, "MaxResponseBytes is -1"},
		{Options{Store: NewMemoryStore(), LockTTL: time.Millisecond}, "LockTTL is 1ms"},
		{Options{Store: NewMemoryStore(), Methods: []string{}}, "empty Methods"},
	} {
		_, err := New(c.opts)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("New(%+v) = %v, want an error saying %q", c.opts, err, c.says)
		}
	}
	m, err := New(Options{RedisURL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close of the dialed client: %v", err)
	}
}

// brokenStore fails every call, as a Redis that is down does.
type brokenStore struct{}

var errDown = errors.New("dial tcp: connection refused")

func (brokenStore) Claim(context.Context, string, string, string, time.Duration) (Claim, error) {
	return Claim{}, errDown
}
func (brokenStore) Extend(context.Context, string, string, time.Duration) error { return errDown }
func (brokenStore) Complete(context.Context, string, string, *Record, time.Duration) error {
	return errDown
}
func (brokenStore) Release(context.Context, string, string) error { return errDown }

func TestStoreDown(t *testing.T) {
	svc := &service{}
	w := serve(newMW(t, brokenStore{}, Options{}).Wrap(svc), request("POST", "k", "x"))
	wantStatus(t, w, 503, "store down, fail closed")
	if w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") != "1" ||
		!strings.Contains(w.Body.String(), "store of Idempotency-Key values is unavailable") {
		t.Errorf("503 with %v and %s", w.Header(), w.Body)
	}
	wantRuns(t, svc, 0)
	w = serve(newMW(t, brokenStore{}, Options{FailOpen: true}).Wrap(svc), request("POST", "k", "x"))
	wantStatus(t, w, 201, "store down, fail open")
	wantRuns(t, svc, 1)
	// Without a key the store is never asked.
	wantStatus(t, serve(newMW(t, brokenStore{}, Options{}).Wrap(svc), request("POST", "", "x")), 201, "no key, store down")
}

// A value under the prefix that is not a record (another program's, or
// corrupted) is a store failure, not a panic or a run.
func TestRedisForeignValue(t *testing.T) {
	c := sharedRedis(t)
	svc := &service{}
	opts := Options{KeyPrefix: "allot:idemtest:foreign:" + newToken() + ":"}
	h := newMW(t, NewRedisStore(c), opts).Wrap(svc)
	ctx := context.Background()
	for i, poison := range []func(k string) error{
		func(k string) error { return c.Set(ctx, k, "a string", time.Minute).Err() },
		func(k string) error { return c.HSet(ctx, k, "s", "d", "f", "x", "r", "\x01\x00\xff").Err() },
		func(k string) error { return c.HSet(ctx, k, "s", "?").Err() },
	} {
		key := "k" + string(rune('0'+i))
		if err := poison(storeKey(opts.KeyPrefix, "", key)); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, serve(h, request("POST", key, "x")), 503, "a foreign value")
	}
	wantRuns(t, svc, 0)
}

func TestRecordRoundTrip(t *testing.T) {
	rec := &Record{Status: 201, Header: http.Header{"A": {"1", ""}, "B": {}}, Body: []byte("body"), Truncated: true}
	got, err := decodeRecord(encodeRecord(rec))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != 201 || len(got.Header) != 2 || got.Header["A"][1] != "" || string(got.Body) != "body" || !got.Truncated {
		t.Errorf("round trip: %+v", got)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(&Record{Status: 200, Header: http.Header{"X": {"y"}}, Body: []byte("z")}))
	f.Add([]byte{1, 0, 0xc8, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Errorf("error %v is not errBadRecord", err)
			}
			return
		}
		if _, err := decodeRecord(encodeRecord(rec)); err != nil {
			t.Errorf("a decoded record does not decode again: %v", err)
		}
	})
}
