package store_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/redistest"
	"github.com/allot-dev/allot/internal/store"
)

// TestMsgpackArgsReadInRedis: what the store encodes as a script item's
// arguments, Redis' cmsgpack reads back exactly, at every boundary of
// MessagePack's integer and string forms.
func TestMsgpackArgsReadInRedis(t *testing.T) {
	opts, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	var vals []any
	for _, n := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<53 - 1,
		-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, -1<<53 + 1} {
		vals = append(vals, n)
	}
	for _, f := range []float64{0, 0.1, 50.0 / 3, 1e-300, 1 << 40, math.MaxFloat64} {
		vals = append(vals, f)
	}
	for _, n := range []int{0, 1, 31, 32, 255, 256, 70000} {
		vals = append(vals, strings.Repeat("é", n/2)+strings.Repeat("k", n%2))
	}
	vals = append(vals, true, false)
	// Numbers come back as '%.17g' text (a bool is written as 0 or 1),
	// strings as themselves.
	const echo = `local out = {}
for i, v in ipairs({ cmsgpack.unpack(ARGV[1]) }) do
  out[i] = type(v) == 'number' and string.format('%.17g', v) or v
end
return out`
	got, err := rdb.Eval(context.Background(), echo, nil, store.Msgpack(vals...)).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vals) {
		t.Fatalf("Redis read %d values, want %d", len(got), len(vals))
	}
	for i, v := range vals {
		ok := false
		switch v := v.(type) {
		case int64:
			ok = got[i] == strconv.FormatInt(v, 10)
		case float64:
			f, err := strconv.ParseFloat(got[i], 64)
			ok = err == nil && f == v
		case string:
			ok = got[i] == v
		case bool:
			ok = got[i] == map[bool]string{false: "0", true: "1"}[v]
		}
		if !ok {
			t.Errorf("value %d (%v): Redis read %q", i, v, got[i])
		}
	}
}
