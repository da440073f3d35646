package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// keysText is the report's section on the keys scenario: how it measures,
// a row per size and strategy, and samples of Redis keys.
func (r *report) keysText() string {
	c := r.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Many keys\n\n"+
		"%d nodes; a token bucket of %d/s per key (burst %d, lease TTL %v); Zipf (s=1.1) over each number of keys, offered %.0f/s in all for %v. "+
		"Per size, four phases: the load (every strategy; the rows \"N keys\" above); then %v idle; then touch once, twice: every node touches min(N, %d) fresh keys once each, "+
		"%.0f keys/s over the fleet (a trickle: an Acquire call carries a key or two), then min(N, %d) more at %.0f keys/s (a flood: calls are full), and the keys live their whole life; "+
		"then hold: one more node holds all N keys, with a lease TTL (%v) longer than the phase, and no traffic.\n\n",
		c.nodes, c.keyLimit, c.keyLimit, c.keysTTL, c.demand*float64(c.limit), c.keysRun, 2*c.keysTTL, c.keysTouch, c.keysTouchRate, c.keysFlood, c.keysFloodRate, holdTTL)
	b.WriteString("| keys | strategy | admitted / ideal | Redis cmds per 1k admitted: sent (all) | node heap per live key (keys held) | per idle key, 2 × TTL later (keys still held) | node CPU per key touched once: trickle; flood (Acquire calls per key) | allocator CPU per key touched once: trickle; flood (Redis cmds sent per key) | node CPU, N keys held, nothing due (keys leased; Redis cmds in the window) | node heap per key held | Redis used_memory per key (keys) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range r.keys {
		if w := k.adaptive; w != nil {
			t, f := k.trickle, k.flood
			fmt.Fprintf(&b, "| %s | %s | %.3f | %.1f (%.1f) | %.0f B (%s) | %.0f B (%s) | %.1f µs (%.2f)%s; %.1f µs (%.3f)%s | %.1f µs (%.2f); %.1f µs (%.3f) | %.1f%% of a core (%s of %s; %d) | %.0f B | %.0f B (%s) |\n",
				thousands(k.keys), w.strategy, float64(w.res.admitted)/w.ideal, w.cmdsClient, w.cmdsAll,
				k.heapLive, thousands(k.held), k.heapIdle, thousands(k.heldIdle),
				t.nodeUS, t.acquires, neverLeft(t), f.nodeUS, f.acquires, neverLeft(f), t.allocUS, t.cmds, f.allocUS, f.cmds,
				k.sweepPct, thousands(int(k.redisKeys)), thousands(k.hold), k.windowCmds, k.heapHeld, k.redisPerKey, thousands(int(k.redisKeys)))
		}
		if w := k.redis; w != nil {
			fmt.Fprintf(&b, "| %s | %s | %.3f | %.1f (%.1f) | — | — | — | — | — | — | — |\n",
				thousands(k.keys), w.strategy, float64(w.res.admitted)/w.ideal, w.cmdsClient, w.cmdsAll)
		}
	}
	b.WriteString("\nHow each figure is measured. Redis commands: INFO commandstats after a warm-up of a fifth of the load, per 1,000 admitted; \"sent\" counts what clients send, \"all\" adds the commands scripts run. " +
		"Node heap: the bench's nodes are Clients in this process; HeapAlloc after two GCs when the load stops, less before it, over the keys the nodes then held (Client.Keys, summed over the nodes); " +
		"per idle key: the same two lease TTLs later, over the same count. " +
		"Node CPU per key touched once: this process's CPU (getrusage) from the first touch until every key has left the nodes (or the wait gave up), less its idle CPU over as long, over the touches (keys × nodes); " +
		"the allocator runs in a process of its own, measured from /proc the same way. " +
		"Node CPU with nothing due: the holding node's process CPU over " + c.keysWindow.String() + ", once the node sends Redis less than a command per second per 10,000 keys (or after a minute), less idle, as a share of one core; " +
		"\"leased\" counts the hold rule's keys in Redis, the keys whose first lease went through. " +
		"Node heap per key held: the holding node's heap then, less before its first key, over the keys it held. " +
		"Redis per key: INFO used_memory then, less before, over the hold rule's keys in Redis (SCAN); one holder per key.\n")
	var samples []string
	for _, k := range r.keys {
		for _, s := range k.samples {
			samples = append(samples, fmt.Sprintf("- %d keys: %s", k.keys, s))
		}
	}
	if len(samples) > 0 {
		b.WriteString("\nMEMORY USAGE of a few keys:\n\n" + strings.Join(samples, "\n") + "\n")
	}
	return b.String()
}

// neverLeft says how many keys of a touch-once run never left, if any.
func neverLeft(t touchResult) string {
	if t.left == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s keys never left)", thousands(t.left))
}

// keysVerdicts states the targets of the keys scenario at its largest size.
func (r *report) keysVerdicts(check func(ok bool, text string, args ...any)) {
	var k *keysResult
	for _, x := range r.keys {
		if k == nil || x.keys > k.keys {
			k = x
		}
	}
	if k == nil || k.adaptive == nil {
		return
	}
	a := k.adaptive
	if rd := k.redis; rd != nil {
		ratio := rd.cmdsClient / math.Max(a.cmdsClient, 1e-9)
		check(a.cmdsClient <= 200 && ratio >= 9, "at %d keys, Redis commands sent per 1,000 admitted: %.1f with adaptive leases (%.1f all), %.1f per-request Redis (%.1f× fewer); target ≤ 200 and ≥ 9× fewer",
			k.keys, a.cmdsClient, a.cmdsAll, rd.cmdsClient, ratio)
	}
	acc := float64(a.res.admitted) / a.ideal
	check(acc >= 0.97 && acc <= 1.01, "at %d keys, admitted/ideal with adaptive leases: %.3f; target 0.97–1.01", k.keys, acc)
	check(k.heapLive <= 300, "at %d keys, node heap per live key: %.0f B (%d keys held over %d nodes; one node holding all %d: %.0f B); target ≤ 300 B",
		k.keys, k.heapLive, k.held, r.cfg.nodes, k.hold, k.heapHeld)
	check(k.heapIdle <= 16, "at %d keys, node heap per idle key, 2 × TTL after the load: %.1f B (%d keys still held); target ≤ 16 B", k.keys, k.heapIdle, k.heldIdle)
	for _, t := range []struct {
		name string
		touchResult
	}{{"a trickle", k.trickle}, {"a flood", k.flood}} {
		check(t.nodeUS <= 5, "at %d keys, node CPU per key touched once, %s of %.0f new keys/s: %.2f µs (allocator: %.2f µs; %.3f Acquire calls per key); target ≤ 5 µs",
			k.keys, t.name, t.rate, t.nodeUS, t.allocUS, t.acquires)
	}
	check(k.sweepPct <= 1, "node CPU with %d keys live and nothing due: %.2f%% of a core; target ≤ 1%%", k.hold, k.sweepPct)
	check(k.redisPerKey <= 200, "at %d keys, Redis used_memory per key: %.0f B; target ≤ 200 B", k.keys, k.redisPerKey)
}

// plotKeys draws the cost of a key against the number of keys: Redis
// commands, CPU and bytes, a panel each, log-log.
func (r *report) plotKeys(path string) error {
	if len(r.keys) == 0 {
		return nil
	}
	type series struct {
		name  string
		value func(*keysResult) (float64, bool)
	}
	panels := []struct {
		title, y string
		lines    []series
	}{
		{"Redis commands per 1,000 admitted", "commands", []series{
			{"adaptive leases, sent", func(k *keysResult) (float64, bool) { return cmdsSent(k.adaptive) }},
			{"adaptive leases, all", func(k *keysResult) (float64, bool) { return cmdsAll(k.adaptive) }},
			{"per-request Redis, sent", func(k *keysResult) (float64, bool) { return cmdsSent(k.redis) }},
		}},
		{"CPU per key touched once", "µs", []series{
			{"node, trickle", func(k *keysResult) (float64, bool) { return k.trickle.nodeUS, true }},
			{"node, flood", func(k *keysResult) (float64, bool) { return k.flood.nodeUS, true }},
			{"allocator, trickle", func(k *keysResult) (float64, bool) { return k.trickle.allocUS, true }},
			{"allocator, flood", func(k *keysResult) (float64, bool) { return k.flood.allocUS, true }},
		}},
		{"Memory per key (≤ 0 drawn at 0.1)", "bytes", []series{
			{"node heap, live (load)", func(k *keysResult) (float64, bool) { return k.heapLive, true }},
			{"node heap, held (one node)", func(k *keysResult) (float64, bool) { return k.heapHeld, true }},
			{"node heap, idle (2 × TTL)", func(k *keysResult) (float64, bool) { return k.heapIdle, true }},
			{"Redis used_memory", func(k *keysResult) (float64, bool) { return k.redisPerKey, true }},
		}},
	}
	minKeys, maxKeys := math.Inf(1), 0.0
	for _, k := range r.keys {
		minKeys, maxKeys = math.Min(minKeys, float64(k.keys)), math.Max(maxKeys, float64(k.keys))
	}
	row := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.Padding = vg.Points(6)
		p.X.Label.Text = "keys"
		p.Y.Label.Text = pn.y
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		lo, hi := math.Inf(1), 0.0
		for j, ln := range pn.lines {
			var pts plotter.XYs
			for _, k := range r.keys {
				// A log axis has no zero: a figure at or below it is drawn at 0.1.
				if v, ok := ln.value(k); ok {
					v = math.Max(v, 0.1)
					pts = append(pts, plotter.XY{X: float64(k.keys), Y: v})
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			col := palette[j%len(palette)]
			line.Color, points.Color = col, col
			if j >= len(palette) {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(line, points)
			p.Legend.Add(ln.name, line, points)
		}
		// The legend sits at the top, over room the lines never reach: the
		// axis goes two decades above the highest figure.
		p.Y.Min, p.Y.Max = lo/3, hi*100
		p.X.Min, p.X.Max = minKeys/2, maxKeys*2
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		p.Add(plotter.NewGrid())
		row[i] = p
	}
	const w, h = 13 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// Side by side, each panel in a third of the image.
	third := w / vg.Length(len(row))
	for i, p := range row {
		x := vg.Length(i) * third
		p.Draw(draw.Crop(dc, x, x+third-w, 0, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cmdsSent and cmdsAll read a row's Redis commands per 1,000 admitted:
// those the client sent, and all that ran.
func cmdsSent(w *row) (float64, bool) {
	if w == nil {
		return 0, false
	}
	return w.cmdsClient, true
}

func cmdsAll(w *row) (float64, bool) {
	if w == nil {
		return 0, false
	}
	return w.cmdsAll, true
}

// keysList writes sizes as "10,000, 100,000 and 1,000,000".
func keysList(sizes []int) string {
	out := make([]string, len(sizes))
	for i, n := range sizes {
		out[i] = thousands(n)
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
