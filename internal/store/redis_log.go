package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/allot-dev/allot/internal/clock"
	"github.com/allot-dev/allot/internal/lograte"
)

// RouteRedisLogs sends go-redis's own log lines (failed dials, pool
// trouble) to log as structured warnings with component=go-redis, rate
// limited per kind of line, instead of unstructured lines on stderr.
// go-redis has one logger per process: the last call wins.
func RouteRedisLogs(log *slog.Logger, clk clock.Clock) {
	redis.SetLogger(redisLogger{lograte.New(log, clk, 0, 0)})
}

type redisLogger struct{ r *lograte.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.r.LogKeyed(format, slog.LevelWarn, "go-redis", "component", "go-redis",
		"detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}
