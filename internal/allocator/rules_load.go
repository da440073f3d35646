package allocator

import "github.com/allot-dev/allot/internal/rules"

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
