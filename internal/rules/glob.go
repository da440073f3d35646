package rules

// globMatch is the one pattern matcher of a rules file: an override's
// match (override.go) and an envoy descriptor's value (envoy.go) both use
// it, so that a '*' means the same in either place.
//
// It reports whether s matches pattern, where '*' stands for any run of
// characters (none included) and every other byte for itself. There is
// no escape: a '*' in pattern is always a wildcard (a literal '*' in s is
// one of the characters it stands for). It walks s once, backing up only
// to the last star: at worst len(pattern)·len(s) steps, never exponential.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
