package httplimit

import (
	"strings"
	"testing"
	"time"
)

func TestRetrySecondsRoundUp(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {-time.Second, 1}, {time.Nanosecond, 1}, {time.Second, 1},
		{time.Second + time.Nanosecond, 2}, {2500 * time.Millisecond, 3}, {3 * time.Second, 3},
		{time.Hour - time.Millisecond, 3600},
	}
	for _, tc := range cases {
		if got := retrySeconds(tc.d); got != tc.want {
			t.Errorf("retrySeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestWriteString(t *testing.T) {
	for in, want := range map[string]string{
		"api-per-key": `"api-per-key"`,
		`a"b\c`:       `"a\"b\\c"`,
		"tab\there":   `"tabhere"`,
		"é":           `""`,
	} {
		var b strings.Builder
		writeString(&b, in)
		if b.String() != want {
			t.Errorf("writeString(%q) = %s, want %s", in, b.String(), want)
		}
	}
}
