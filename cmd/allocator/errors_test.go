package main

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// Each error is printed once, says once what was wrong and what was
// expected, and names where the value came from: no layer repeats another's
// prefix (it read "allocator: allocator: redis: store: DialRedis: redis:
// invalid URL scheme: http"), a bad number or duration says what it should
// be (the flag package says "parse error"), a password in a URL is
// redacted, and a bad flag prints neither the error twice nor the whole
// usage.
func TestErrorTexts(t *testing.T) {
	const redisWant = "want a URL such as redis://user:password@host:6379/0"
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"redis scheme", nil, []string{"--redis", "http://localhost:6379"},
			`--redis "http://localhost:6379": want a redis:// or rediss:// URL, got scheme "http"`},
		{"redis scheme, env", []string{"ALLOT_REDIS=http://:s3cret@localhost:6379"}, nil,
			`--redis "http://:xxxxx@localhost:6379": want a redis:// or rediss:// URL, got scheme "http"`},
		{"redis database", nil, []string{"--redis", "redis://:s3cret@localhost:6379/zero"},
			`--redis "redis://:xxxxx@localhost:6379/zero": invalid database number: "zero"; ` + redisWant},
		{"redis option", nil, []string{"--redis", "redis://localhost:6379?colour=blue"},
			`--redis "redis://localhost:6379?colour=blue": unexpected option: colour; ` + redisWant},
		{"redis not a URL", nil, []string{"--redis", "redis://:s3%zzcret@localhost"},
			`--redis: invalid URL escape "%zz"; ` + redisWant},
		{"duration, env", []string{"ALLOT_STORE_TIMEOUT=abc"}, nil,
			`ALLOT_STORE_TIMEOUT="abc": want a duration such as 500ms`},
		{"duration, flag", nil, []string{"--store-timeout", "abc"},
			`invalid value "abc" for flag -store-timeout: want a duration such as 500ms`},
		{"whole number, env", []string{"ALLOT_MAX_INFLIGHT=lots"}, nil,
			`ALLOT_MAX_INFLIGHT="lots": want a whole number`},
		{"number, flag", nil, []string{"--max-new-keys-per-node", "ten"},
			`invalid value "ten" for flag -max-new-keys-per-node: want a number such as 2.5`},
		{"boolean, env", []string{"ALLOT_REDIS_CLUSTER=maybe"}, nil,
			`ALLOT_REDIS_CLUSTER="maybe": want true or false`},
		{"unknown flag", nil, []string{"--colour"},
			`flag provided but not defined: -colour (see --help)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append(c.args, "--metrics", "", "--log-level", "error")...)
			cmd.Env = append(append(os.Environ(), "ALLOT_TEST_MAIN=1", "ALLOT_LISTEN=127.0.0.1:0"), c.env...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
			}
			if got, want := string(out), "allocator: "+c.want+"\n"; got != want {
				t.Errorf("output\n%s\nwant\n%s", got, want)
			}
		})
	}
}
