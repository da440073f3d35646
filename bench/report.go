package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/allot-dev/allot/internal/rules"
)

type report struct {
	cfg      *config
	rows     []row
	failover *failoverRun
	keys     []*keysResult
	regions  []regionsRow
	when     time.Time
}

type failoverRun struct {
	res           *result
	kill, restore time.Duration
	rule          *rules.Rule
}

func (r *report) find(scenario, strategy string) *row {
	for i := range r.rows {
		if strings.HasPrefix(r.rows[i].scenario, scenario) && r.rows[i].strategy == strategy {
			return &r.rows[i]
		}
	}
	return nil
}

func (r *report) write(dir string) error {
	r.when = time.Now().UTC()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var plots []string
	if r.find("uniform", "allot adaptive") != nil {
		if err := r.plotLeases(filepath.Join(dir, "lease-accuracy.png"), plotAccuracy); err != nil {
			return err
		}
		if err := r.plotLeases(filepath.Join(dir, "lease-redis.png"), plotRedisLoad); err != nil {
			return err
		}
		plots = append(plots, "lease-accuracy.png", "lease-redis.png")
	}
	if r.failover != nil {
		if err := r.plotFailover(filepath.Join(dir, "failover.png")); err != nil {
			return err
		}
		plots = append(plots, "failover.png")
	}
	if r.find("distance", "allot rate shares") != nil {
		if err := r.plotDistance(filepath.Join(dir, "distance.png")); err != nil {
			return err
		}
		plots = append(plots, "distance.png")
	}
	if len(r.keys) > 0 {
		if err := r.plotKeys(filepath.Join(dir, "keys.png")); err != nil {
			return err
		}
		plots = append(plots, "keys.png")
	}
	if len(r.regions) > 0 {
		if err := r.plotRegions(filepath.Join(dir, "regions.png")); err != nil {
			return err
		}
		plots = append(plots, "regions.png")
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown(plots)), 0o644)
}

func (r *report) markdown(plots []string) string {
	c := r.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "# Allot bench — %s\n\n", r.when.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "%d nodes × %d workers on one machine (%d cores, %s); one token-bucket rule of %d/s with a burst of %d; "+
		"offered load %.1f× the limit; runs of %v (Redis statistics after a warm-up of a fifth), throughput runs of %v; "+
		"allocator in its own process on Redis; %s keys (Zipf s=1.1, %d/s each) in the many-keys runs, of %v each.\n\n",
		c.nodes, c.workers, runtime.NumCPU(), runtime.GOARCH, c.limit, c.burst, c.demand, c.duration, c.saturate, keysList(c.keysSizes), c.keyLimit, c.keysRun)
	b.WriteString(r.verdicts())
	b.WriteString("\n| scenario | strategy | admitted / ideal | worst 1 s / bound | decisions/s (saturated) | p50 | p99 | p99.9 | Redis cmds per 1k admitted: sent (all) | allocator CPU s | Redis CPU s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range r.rows {
		if strings.HasPrefix(w.scenario, "distance") {
			continue // a table of its own
		}
		sat := "—"
		if w.perSec > 0 {
			sat = fmt.Sprintf("%.0f", w.perSec)
		}
		worst := "—"
		if w.worst > 0 {
			worst = fmt.Sprintf("%.2f", w.worst)
		}
		fmt.Fprintf(&b, "| %s | %s | %.3f | %s | %s | %v | %v | %v | %.1f (%.1f) | %.2f | %.2f |\n",
			w.scenario, w.strategy, float64(w.res.admitted)/w.ideal, worst, sat,
			w.res.latency.quantile(0.5), w.res.latency.quantile(0.99), w.res.latency.quantile(0.999),
			w.cmdsClient, w.cmdsAll, w.allocCPU, w.redisCPU)
	}
	b.WriteString(r.gubernatorText())
	b.WriteString("\nadmitted / ideal: admissions over what a perfect limiter would admit (per key, the offered load or burst + rate × run, whichever is less). " +
		"worst 1 s / bound: the most admitted in any one-second window over the most a token bucket allows in one second, burst + rate (for many keys: the hottest key); above 1 is over-admission. " +
		"Latencies include two clock reads (~60 ns here). \"sent\" counts the commands clients send (EVALSHA, EVAL); \"all\" adds those scripts run inside Redis (TIME, GET, SET…). Neither counts the allocator's DBSIZE, ten a second for `--redis-max-keys` whatever the traffic.\n")
	if len(r.keys) > 0 {
		b.WriteString(r.keysText())
	}
	if r.find("distance", "allot rate shares") != nil {
		b.WriteString(r.distanceText())
	}
	if len(r.regions) > 0 {
		b.WriteString(r.regionsText())
	}
	if r.failover != nil {
		b.WriteString(r.failoverText())
	}
	for _, p := range plots {
		fmt.Fprintf(&b, "\n![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
	}
	return b.String()
}

// verdicts states the figures this design is judged by, met or not.
func (r *report) verdicts() string {
	var b strings.Builder
	b.WriteString("## The figures\n\n")
	check := func(ok bool, text string, args ...any) {
		mark := "met"
		if !ok {
			mark = "**MISSED**"
		}
		fmt.Fprintf(&b, "- %s — "+text+"\n", append([]any{mark}, args...)...)
	}
	hy, rd := r.find("uniform", "allot adaptive"), r.find("uniform", "Redis Lua per request")
	if hy != nil && rd != nil && rd.perSec > 0 {
		ratio := hy.perSec / rd.perSec
		check(ratio >= 20, "hybrid sustains %.0f decisions/s, %.0f× per-request Redis (%.0f/s); target ≥ 20×", hy.perSec, ratio, rd.perSec)
	}
	if hy != nil {
		check(hy.cmdsClient <= 2, "Redis commands per 1,000 admitted with adaptive leases at steady state: %.1f sent by clients (%.1f counting the commands scripts run inside Redis); target ≤ 2 sent", hy.cmdsClient, hy.cmdsAll)
		acc := float64(hy.res.admitted) / hy.ideal
		check(acc >= 0.97 && acc <= 1.01, "admitted/ideal under uniform %.1f× load: %.3f; target 0.97–1.01", r.cfg.demand, acc)
	}
	sk, lo := r.find("skew", "allot adaptive"), r.find("skew", "local only (limit/N)")
	if sk != nil {
		acc := float64(sk.res.admitted) / sk.ideal
		text := "skewed load (%.0f%% on one node): hybrid admits %.3f of the ideal; target ≥ 0.97"
		args := []any{100 * r.cfg.skew, acc}
		if lo != nil {
			text += "; local-only admits %.3f"
			args = append(args, float64(lo.res.admitted)/lo.ideal)
		}
		check(acc >= 0.97, text, args...)
	}
	var worstNear float64 = 2
	var near []string
	for _, w := range r.rows {
		if strings.HasPrefix(w.scenario, "distance") && w.strategy == "allot rate shares" && w.rtt <= 200*time.Millisecond {
			acc := float64(w.res.admitted) / w.ideal
			worstNear = min(worstNear, acc)
			near = append(near, fmt.Sprintf("%v: %.3f", w.rtt, acc))
		}
	}
	if len(near) > 0 {
		check(worstNear >= 0.97, "leases with rate shares at round trips up to 200ms admit %s of the ideal; target ≥ 0.97 at each", strings.Join(near, ", "))
	}
	r.keysVerdicts(check)
	r.regionsVerdicts(check)
	return b.String()
}

func (r *report) failoverText() string {
	f := r.failover
	rate := f.rule.Rate()
	per := int(time.Second / binWidth)
	phase := func(from, to time.Duration) (admitted, fallback int64) {
		for i := int(from / binWidth); i < int(to/binWidth) && i < len(f.res.bins); i++ {
			admitted += f.res.bins[i]
			fallback += f.res.fallbacks[i]
		}
		return
	}
	down := f.restore - f.kill
	adm, _ := phase(f.kill, f.restore)
	recovered := "not within the run"
	for i := int(f.restore / binWidth); i < len(f.res.fallbacks); i++ {
		if f.res.fallbacks[i] == 0 {
			recovered = fmt.Sprintf("%v", (time.Duration(i)*binWidth - f.restore).Round(binWidth))
			break
		}
	}
	_ = per
	return fmt.Sprintf("\n## Failover\n\nThe allocator was killed (SIGKILL) at %v and restarted at %v. While it was down the fleet admitted %d against %.0f for the rule's rate over those %v (%.3f×), deciding from leases until they ran out and then from each node's share, limit/%d. "+
		"Decisions were back on leases (no fallback decision in a %v bin) %s after the restart.\n",
		f.kill.Round(10*time.Millisecond), f.restore.Round(10*time.Millisecond), adm, rate*down.Seconds(), down.Round(10*time.Millisecond),
		float64(adm)/(rate*down.Seconds()), r.cfg.nodes, binWidth, recovered)
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255},
	color.RGBA{R: 127, G: 127, B: 127, A: 255},
}

// leaseAxis is what a lease-size plot shows against the lease size.
type leaseAxis int

const (
	plotAccuracy  leaseAxis = iota // admitted / ideal
	plotRedisLoad                  // Redis commands sent per 1,000 admitted
)

// plotLeases draws fixed lease sizes against accuracy or Redis load, with
// adaptive leases (and, for load, per-request Redis) as reference lines.
func (r *report) plotLeases(path string, y leaseAxis) error {
	p := plot.New()
	p.X.Label.Text = "fixed lease size (tokens)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	value := func(w *row) float64 { return float64(w.res.admitted) / w.ideal }
	p.Title.Text = "Lease size against accuracy (uniform load)"
	p.Y.Label.Text = "admitted / ideal"
	if y == plotRedisLoad {
		value = func(w *row) float64 { return math.Max(w.cmdsClient, 0.01) }
		p.Title.Text = "Lease size against Redis load (uniform load)"
		p.Y.Label.Text = "Redis commands sent per 1,000 admitted"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	var pts plotter.XYs
	for i := range r.rows {
		if w := &r.rows[i]; w.scenario == "uniform" && w.lease > 0 {
			pts = append(pts, plotter.XY{X: float64(w.lease), Y: value(w)})
		}
	}
	if len(pts) == 0 {
		return nil
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, points.Color = palette[0], palette[0]
	p.Add(line, points)
	p.Legend.Add("fixed leases", line, points)
	lo, hi := pts[0].X, pts[len(pts)-1].X
	ref := func(name string, y float64, c color.Color) {
		l, _ := plotter.NewLine(plotter.XYs{{X: lo, Y: y}, {X: hi, Y: y}})
		l.Color, l.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(name, l)
	}
	if w := r.find("uniform", "allot adaptive"); w != nil {
		ref("adaptive leases", value(w), palette[2])
	}
	if w := r.find("uniform", "Redis Lua per request"); w != nil {
		ref("Redis Lua per request", value(w), palette[1])
	}
	if w := r.find("uniform", "local only (limit/N)"); w != nil && y == plotAccuracy {
		ref("local only (limit/N)", value(w), palette[3])
	}
	if y == plotAccuracy { // per request like Redis Lua; on accuracy only
		if w := r.find("uniform", "Check RPC per request"); w != nil {
			ref("Check RPC per request", value(w), palette[6])
		}
		for i, w := range r.gubernatorRows() {
			ref(w.strategy, value(w), palette[4+i%2])
		}
	}
	// Where the lines are not: for load, between the lease lines at the
	// bottom and per-request Redis at the top. For accuracy, the lines
	// may be anywhere from 0 up (per-request strategies that cannot keep
	// up admit a fraction): the legend sits at the top, over room no line
	// reaches, the axis going half as high again as the highest figure.
	p.Legend.Top, p.Legend.Left = false, false
	if y == plotRedisLoad {
		p.Legend.YOffs = 1.2 * vg.Inch
	} else {
		hi := 0.0
		for i := range r.rows {
			if w := &r.rows[i]; w.scenario == "uniform" {
				hi = max(hi, value(w))
			}
		}
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		p.Y.Min, p.Y.Max = 0, 1.5*hi
	}
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// plotFailover draws the admitted rate per second against the limit, with
// the outage marked.
func (r *report) plotFailover(path string) error {
	f := r.failover
	p := plot.New()
	p.Title.Text = "Allocator killed and restarted: admitted rate"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "per second"
	scale := float64(time.Second / binWidth)
	var adm, fb plotter.XYs
	for i, n := range f.res.bins {
		t := (float64(i) + 0.5) * binWidth.Seconds()
		adm = append(adm, plotter.XY{X: t, Y: float64(n) * scale})
		fb = append(fb, plotter.XY{X: t, Y: float64(f.res.fallbacks[i]) * scale})
	}
	la, _ := plotter.NewLine(adm)
	la.Color, la.Width = palette[0], vg.Points(1.5)
	lf, _ := plotter.NewLine(fb)
	lf.Color = palette[3]
	end := f.res.elapsed.Seconds()
	limit, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: f.rule.Rate()}, {X: end, Y: f.rule.Rate()}})
	limit.Color, limit.Dashes = palette[1], []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(la, lf, limit)
	p.Legend.Add("admitted", la)
	p.Legend.Add("fallback decisions", lf)
	p.Legend.Add("limit", limit)
	top := f.rule.Rate() * r.cfg.demand * 1.1
	for _, m := range []struct {
		at   time.Duration
		name string
	}{{f.kill, "killed"}, {f.restore, "restarted"}} {
		l, _ := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: 0}, {X: m.at.Seconds(), Y: top}})
		l.Color = color.Gray{Y: 100}
		p.Add(l)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: m.at.Seconds(), Y: top}}, Labels: []string{" " + m.name}})
		if err == nil {
			p.Add(lbl)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.05
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Points(10)
	_ = draw.PosRight
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// summary is what the command prints at the end.
func (r *report) summary() string {
	return r.verdicts() + "\nreport: " + filepath.Join(r.cfg.out, "results.md")
}
