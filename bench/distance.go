package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/allot-dev/allot/internal/netdelay"
)

// The distance scenario puts a delay proxy between every node and the
// allocator (and Redis, for per-request Redis) and sweeps the round trip:
// leases with rate shares, leases of tokens only (how nodes leased before
// rate shares), and per-request Redis.

var distanceKinds = []struct {
	name, label string
}{
	{"shares", "allot rate shares"},
	{"tokens", "allot tokens only"},
	{"redis", "Redis Lua per request"},
}

func distanceRule(kind string, rtt time.Duration) string {
	return fmt.Sprintf("dist-%s-%d", kind, rtt.Milliseconds())
}

func distanceScenario(rtt time.Duration) string { return fmt.Sprintf("distance %v", rtt) }

func (s *session) distance(rep *report) error {
	c := s.cfg
	redisAddr, err := hostPort(s.redisURL)
	if err != nil {
		return err
	}
	for _, rtt := range c.distanceRTTs {
		for _, kind := range distanceKinds {
			target := s.allocAddr
			if kind.name == "redis" {
				target = redisAddr
			}
			proxies, err := startProxies(c.nodes, target, rtt)
			if err != nil {
				return err
			}
			via := func(i int) string { return proxies[i].Addr() }
			r := s.rule(distanceRule(kind.name, rtt))
			var st strategy
			switch kind.name {
			case "redis":
				st, err = newPerRequestRedisVia(r, c.nodes, via, s.redisURL, fmt.Sprintf("classic:dist%d:", rtt.Milliseconds()))
			default:
				st, err = newHybridVia(r.Name, c.nodes, func(i int) []string { return []string{via(i)} },
					hybridOptions{tokensOnly: kind.name == "tokens", roundTrip: rtt})
			}
			if err != nil {
				closeProxies(proxies)
				return fmt.Errorf("%s at %v: %w", kind.label, rtt, err)
			}
			l := s.baseLoad(uniformRates(c.nodes, c.demand*float64(c.distanceLimit)), 1)
			l.duration = c.distanceRun
			row := s.measure(distanceScenario(rtt), kind.label, -1, st, l, r)
			row.rtt = rtt
			rep.rows = append(rep.rows, row)
			st.close()
			closeProxies(proxies)
		}
	}
	return nil
}

func startProxies(n int, target string, rtt time.Duration) ([]*netdelay.Proxy, error) {
	var out []*netdelay.Proxy
	for range n {
		p, err := netdelay.Start(target, rtt)
		if err != nil {
			closeProxies(out)
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func closeProxies(ps []*netdelay.Proxy) {
	for _, p := range ps {
		p.Close()
	}
}

func hostPort(redisURL string) (string, error) {
	u, err := url.Parse(redisURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("cannot read host:port from Redis URL %q", redisURL)
	}
	return u.Host, nil
}

// distanceText is the report's distance section: a table by round trip.
func (r *report) distanceText() string {
	var b strings.Builder
	c := r.cfg
	fmt.Fprintf(&b, "\n## Distance\n\nA delay proxy between each node and the allocator (for per-request Redis: between each node and Redis); "+
		"a token bucket of %d/s with a burst of %d and a 2 s lease TTL, offered %.1f× its rate; runs of %v.\n\n",
		c.distanceLimit, c.distanceBurst, c.demand, c.distanceRun)
	b.WriteString("| round trip | strategy | admitted / ideal | worst 1 s / (burst + rate) | Redis cmds per 1k admitted: sent (all) |\n|---|---|---|---|---|\n")
	for _, w := range r.rows {
		if !strings.HasPrefix(w.scenario, "distance") {
			continue
		}
		fmt.Fprintf(&b, "| %v | %s | %.3f | %.2f | %.1f (%.1f) |\n", w.rtt, w.strategy, float64(w.res.admitted)/w.ideal, w.worst, w.cmdsClient, w.cmdsAll)
	}
	return b.String()
}

// plotDistance draws admitted/ideal against the round trip, a line per
// strategy.
func (r *report) plotDistance(path string) error {
	p := plot.New()
	p.Title.Text = "Accuracy against distance to the allocator"
	p.X.Label.Text = "round trip (ms)"
	p.Y.Label.Text = "admitted / ideal"
	p.Y.Min, p.Y.Max = 0, 1.1
	for i, kind := range distanceKinds {
		var pts plotter.XYs
		for _, w := range r.rows {
			if strings.HasPrefix(w.scenario, "distance") && w.strategy == kind.label {
				pts = append(pts, plotter.XY{X: float64(w.rtt.Milliseconds()), Y: float64(w.res.admitted) / w.ideal})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = palette[i], palette[i]
		p.Add(line, points)
		p.Legend.Add(kind.label, line, points)
	}
	// Right, between the lines: rate shares stay near 1, the others fall
	// low at large round trips.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = 1.3 * vg.Inch
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
