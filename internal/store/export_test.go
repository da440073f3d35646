package store

import "fmt"

// ScriptSources maps the SHA-1 of each script to its source, so that a test
// can rewrite the script calls the store sends (see redis_clock_test.go).
func ScriptSources() map[string]string {
	m := make(map[string]string, len(scripts))
	for _, sc := range scripts {
		if sc != nil {
			m[sc.sha] = sc.src
		}
	}
	return m
}

// PollKeys reads the database's size now, as the poller does each second.
func (s *Redis) PollKeys() { s.pollKeys() }

// Msgpack encodes vals (int64, float64, string or bool) as the store encodes
// a script item's arguments.
func Msgpack(vals ...any) []byte {
	var m msgpack
	for _, v := range vals {
		switch v := v.(type) {
		case int64:
			m = m.int(v)
		case float64:
			m = m.float(v)
		case string:
			m = m.str(v)
		case bool:
			m = m.bool(v)
		default:
			panic(fmt.Sprintf("store: Msgpack: %T", v))
		}
	}
	return m
}
