package allocator

import (
	"errors"

	"github.com/allot-dev/allot/internal/rules"
)

// loadRules reads what the rules come from at start-up and on Reload: the
// rules file, and the directory of envoyproxy/ratelimit config files
// (Config.EnvoyConfigDir) whose domains join the file's envoy section.
// Callers call it when at least one of the two is given.
// Both are read again on each reload, so that a directory edited in place,
// or a Kubernetes volume whose link was swapped, takes effect on SIGHUP as
// a rules file does. With a directory and no rules file, the rules list is
// empty rather than the built-in example's: such an allocator was started
// to serve Envoy, and example rules it was never given would be a surprise.
func (a *Allocator) loadRules() (*rules.Set, error) {
	var set *rules.Set
	var err error
	switch {
	case a.cfg.RulesFile != "":
		set, err = rules.Load(a.cfg.RulesFile)
	case a.cfg.Rules != nil:
		set = a.cfg.Rules
	default:
		set, err = rules.NewSet(nil)
	}
	if err != nil || a.cfg.EnvoyConfigDir == "" {
		return set, err
	}
	return rules.WithEnvoyDir(set, a.cfg.EnvoyConfigDir)
}

func (a *Allocator) initialRules() (*rules.Set, error) {
	switch {
	case a.cfg.RulesFile != "" || a.cfg.EnvoyConfigDir != "":
		return a.loadRules()
	case a.cfg.Rules != nil:
		return a.cfg.Rules, nil
	}
	a.log.Info("no rules file given: serving the built-in example rules (see docs/configuration.md)")
	return rules.Example(), nil
}

// Reload re-reads the rules file and the envoy config directory. An
// invalid file keeps the current rules; the error says why.
func (a *Allocator) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.cfg.RulesFile == "" && a.cfg.EnvoyConfigDir == "" {
		return errors.New("no rules file to reload (started without --config)")
	}
	set, err := a.loadRules()
	a.metrics.ObserveReload(err)
	if err != nil {
		a.log.Error("rules reload failed; keeping the current rules", "err", err, "rules_version", a.server.Rules().Version())
		return err
	}
	old := a.server.Rules().Version()
	a.warnGlobalWithoutParent(set)
	a.overlay.SetFile(set) // with the runtime overrides merged in
	a.envoy.RulesLoaded(set)
	domains, limits := envoySize(set)
	a.log.Info("rules reloaded", "rules", set.Len(), "envoy_domains", domains, "envoy_limits", limits,
		"rules_version", a.server.Rules().Version(), "previous_version", old)
	return nil
}

// envoySize counts what the rules' envoy section holds, for the logs: its
// domains and its limits (descriptors with a rate_limit). rules= counts the
// rules section alone, so a file with only an envoy section says rules=0;
// the counts are logged as envoy_domains and envoy_limits, apart from
// envoy=, the Envoy listener's address.
func envoySize(set *rules.Set) (domains, limits int) {
	env := set.Envoy()
	if env == nil {
		return 0, 0
	}
	for _, name := range env.Domains() {
		dom, _ := env.Domain(name)
		domains++
		limits += len(dom.Limits())
	}
	return domains, limits
}
