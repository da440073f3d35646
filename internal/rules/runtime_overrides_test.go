package rules

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const runtimeYAML = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 1000
    period: 1m
    burst: 200
    overrides:
      - key: tenant-42
        limit: 10000
      - match: "crawler-*"
        limit: 100
  - name: hourly
    algorithm: fixed_window
    limit: 500
    period: 1h
`

func runtimeSet(t *testing.T) *Set {
	t.Helper()
	s, err := Parse("runtime.yaml", []byte(runtimeYAML))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The API's override of a key replaces the file's, beats the file's
// patterns, and once expired leaves the file's to apply again.
func TestWithRuntimePrecedence(t *testing.T) {
	file := runtimeSet(t)
	t0 := time.Unix(1_000_000, 0)
	ovs := []RuntimeOverride{
		{Rule: "api", Key: "tenant-42", Limit: 50, Expires: t0.Add(time.Minute)},
		{Rule: "api", Key: "crawler-good", Limit: 5000, Burst: 700},
		{Rule: "hourly", Key: "batch", Limit: 2000},
	}
	set, errs := file.WithRuntime(ovs, t0)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if set.Version() == file.Version() {
		t.Fatal("the merged set kept the file's version: nodes would not fetch it")
	}
	api, _ := set.Get("api")
	for _, c := range []struct {
		key          string
		limit, burst int64
	}{
		{"tenant-42", 50, 10},       // the API's, over the file's exact key; burst scaled
		{"crawler-good", 5000, 700}, // the API's, over the file's pattern
		{"crawler-other", 100, 20},  // the file's pattern
		{"plain", 1000, 200},        // the rule
	} {
		r := api.ForKey(c.key)
		if r.Limit != c.limit || r.Burst != c.burst {
			t.Errorf("%s: limit %d burst %d, want %d and %d", c.key, r.Limit, r.Burst, c.limit, c.burst)
		}
	}
	hourly, _ := set.Get("hourly")
	if got := hourly.ForKey("batch").Limit; got != 2000 {
		t.Errorf("hourly batch: limit %d, want 2000", got)
	}

	again, _ := file.WithRuntime(ovs, t0)
	if again.Version() != set.Version() {
		t.Error("the same overrides merged twice give two versions: allocators sharing a store would disagree")
	}
	later, _ := file.WithRuntime(ovs, t0.Add(time.Minute))
	api, _ = later.Get("api")
	if got := api.ForKey("tenant-42").Limit; got != 10000 {
		t.Errorf("after the API's override expired, tenant-42 has limit %d, want the file's 10000", got)
	}
	if same, _ := file.WithRuntime(nil, t0); same != file {
		t.Error("no runtime overrides: want the file's set itself")
	}
	if orig, _ := file.Get("api"); orig.ForKey("crawler-good").Limit != 100 {
		t.Error("merging changed the file's own set")
	}
}

// What the file's overrides do not allow, the API does not either; an
// override the file stopped admitting waits, named in the errors.
func TestCheckRuntime(t *testing.T) {
	file := runtimeSet(t)
	api, _ := file.Get("api")
	hourly, _ := file.Get("hourly")
	for _, c := range []struct {
		r     *Rule
		o     RuntimeOverride
		field string
	}{
		{api, RuntimeOverride{Limit: 5}, "key"},
		{api, RuntimeOverride{Key: "k", Limit: 0}, "limit"},
		{api, RuntimeOverride{Key: "k", Limit: MaxLimit + 1}, "limit"},
		{api, RuntimeOverride{Key: "k", Limit: 5, Burst: -1}, "burst"},
		{api, RuntimeOverride{Key: strings.Repeat("k", MaxOverrideKey+1), Limit: 5}, "key"},
		{hourly, RuntimeOverride{Key: "k", Limit: 5, Burst: 5}, "burst"},
	} {
		err := c.r.CheckRuntime(&c.o)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.o, err, c.field)
		}
	}
	ovs := []RuntimeOverride{{Rule: "gone", Key: "k", Limit: 5}, {Rule: "hourly", Key: "k", Limit: 5, Burst: 9}, {Rule: "api", Key: "k", Limit: 5}}
	set, errs := file.WithRuntime(ovs, time.Unix(0, 0))
	if len(errs) != 2 {
		t.Fatalf("errors %v, want one for the unknown rule and one for the burst", errs)
	}
	if r, _ := set.Get("api"); r.ForKey("k").Limit != 5 {
		t.Error("a valid override was left out with the invalid ones")
	}
}
