package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/allot-dev/allot/internal/clock"
)

func TestBurstThenOneEveryIntervalWithDropCount(t *testing.T) {
	var buf bytes.Buffer
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := New(slog.New(slog.NewTextHandler(&buf, nil)), clk, 3, 10*time.Second)
	for range 100 {
		r.Warn("store call failed", "op", "acquire")
	}
	r.Warn("another message")
	if got := strings.Count(buf.String(), "store call failed"); got != 3 {
		t.Fatalf("%d lines of a message logged 100 times at once, want the burst of 3:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Fatal("a different message was held back by the first one's limit")
	}
	buf.Reset()
	clk.Advance(10 * time.Second)
	r.Warn("store call failed", "op", "acquire")
	r.Warn("store call failed", "op", "acquire")
	if out := buf.String(); strings.Count(out, "store call failed") != 1 || !strings.Contains(out, "dropped=97") {
		t.Fatalf("after 10s: %q, want one line saying dropped=97", out)
	}
}

func TestDisabledLevelCostsNothing(t *testing.T) {
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), nil, 0, 0)
	r.Warn("quiet")
	if buf.Len() != 0 || len(r.msgs) != 0 {
		t.Fatalf("a disabled level logged %q or kept state", buf.String())
	}
}
