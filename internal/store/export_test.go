package store

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
