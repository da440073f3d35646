package main

// What the keys scenario reads of this process and of Redis: CPU, heap and
// profiles, pacing and waiting, Redis memory and key counts.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profilePath puts what and size before path's extension.
func profilePath(path, what string, size int) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s-%s%d%s", strings.TrimSuffix(path, ext), what, size, ext)
}

// writeHeapProfile writes the heap profile of this moment; with no path it
// does nothing.
func writeHeapProfile(path, what string, size int) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(profilePath(path, what+"-", size))
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.WriteHeapProfile(f)
}

// startProfile starts a CPU profile; with no path it does nothing.
func startProfile(path, what string, size int) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(profilePath(path, what+"-", size))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// pace calls f(0..n-1) at rate calls per second, in steps of 10ms.
func pace(rate float64, n int, f func(i int)) {
	const step = 10 * time.Millisecond
	start := time.Now()
	for i := 0; i < n; {
		due := min(int(rate*time.Since(start).Seconds())+1, n)
		for ; i < due; i++ {
			f(i)
		}
		time.Sleep(step)
	}
}

func waitFor(within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// selfCPU is the user and system CPU this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleCPU is the CPU per second of wall time of this process and of the
// allocator while they do nothing but their background loops, over d: the
// baseline the phases subtract.
func (s *session) idleCPU(d time.Duration) (self, alloc time.Duration) {
	runtime.GC()
	c0, a0, t0 := selfCPU(), s.allocCPU(), time.Now()
	time.Sleep(d)
	wall := time.Since(t0).Seconds()
	return time.Duration(float64(selfCPU()-c0) / wall), time.Duration(float64(s.allocCPU()-a0) / wall)
}

func (s *session) allocCPU() time.Duration {
	a, _ := s.cpu()
	return time.Duration(a * float64(time.Second))
}

// heapAfterGC is the live heap: two collections, so that what sync.Pools
// keep for one cycle is gone too.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// usedMemory is Redis's INFO memory used_memory.
func (s *session) usedMemory() int64 {
	info, err := s.rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// countKeys counts the keys that match pattern.
func (s *session) countKeys(pattern string) int64 {
	var n int64
	it := s.rdb.Scan(context.Background(), 0, pattern, 10000).Iterator()
	for it.Next(context.Background()) {
		n++
	}
	return n
}

// dropKeys deletes the keys that match any of patterns (UNLINK, in
// batches).
func (s *session) dropKeys(patterns ...string) {
	ctx := context.Background()
	for _, pattern := range patterns {
		it := s.rdb.Scan(ctx, 0, pattern, 10000).Iterator()
		var batch []string
		for it.Next(ctx) {
			if batch = append(batch, it.Val()); len(batch) == 1000 {
				s.rdb.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			s.rdb.Unlink(ctx, batch...)
		}
	}
}

// memoryUsage samples MEMORY USAGE of up to three keys that match pattern.
func (s *session) memoryUsage(pattern, kind string) []string {
	ctx := context.Background()
	var keys []string
	it := s.rdb.Scan(ctx, 0, pattern, 10000).Iterator()
	for len(keys) < 3 && it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	var out []string
	for _, k := range keys {
		kind2, err1 := s.rdb.Type(ctx, k).Result()
		n, err2 := s.rdb.MemoryUsage(ctx, k).Result()
		if err1 != nil || err2 != nil || kind2 == "none" { // expired meanwhile
			continue
		}
		out = append(out, fmt.Sprintf("%s `%s`: %d B (a %s)", kind, k, n, kind2))
	}
	return out
}

// settleRedis waits, up to 30s, until Redis has purged the keys that
// expired: until its key count stops falling.
func (s *session) settleRedis() {
	ctx := context.Background()
	last := int64(-1)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, err := s.rdb.DBSize(ctx).Result()
		if err != nil || n == last {
			return
		}
		last = n
		time.Sleep(500 * time.Millisecond)
	}
}

// waitRedisCalm waits, up to within, until clients have sent Redis at
// least want commands since the statistics were reset, and fewer than
// perSec a second over the last second.
func (s *session) waitRedisCalm(want int64, perSec float64, within time.Duration) {
	deadline := time.Now().Add(within)
	last, _ := s.commandStats()
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		sent, _ := s.commandStats()
		if sent >= want && float64(sent-last-1) < perSec {
			return
		}
		last = sent
	}
	progress("  Redis not calm within %v: %d commands sent", within, last)
}
