package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestFlagDefaultsAsDocumented holds the flag table of
// docs/configuration.md to the flags' own defaults: each default is set
// once, in the code (allocator.DefaultConfig, or main.go's own), and the
// table says the same.
func TestFlagDefaultsAsDocumented(t *testing.T) {
	var help bytes.Buffer
	if _, err := parse([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	// "  -name type\n    \tusage (default X)"
	inCode := map[string]string{}
	name := ""
	defaultOf := regexp.MustCompile(`\(default "?(.*?)"?\)$`)
	for _, line := range strings.Split(help.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ = strings.Cut(rest, " ")
			continue
		}
		if m := defaultOf.FindStringSubmatch(line); m != nil && name != "" {
			inCode[name] = m[1]
		}
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| (`--[^|]*) \\|.*\\| ([^|]*) \\|$")
	backticked := regexp.MustCompile("`([^`]*)`")
	checked := 0
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var flags, said []string
		for _, f := range backticked.FindAllStringSubmatch(m[1], -1) {
			flags = append(flags, strings.TrimPrefix(f[1], "--"))
		}
		if strings.HasPrefix(m[2], "`") {
			for _, v := range backticked.FindAllStringSubmatch(m[2], -1) {
				said = append(said, v[1])
			}
		}
		for i, f := range flags {
			if flag := inCode[f]; i < len(said) && !strings.HasPrefix(said[i], "--") {
				if said[i] != flag {
					t.Errorf("docs/configuration.md: --%s defaults to %q, the code to %q", f, said[i], flag)
				}
				checked++
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked %d flags' defaults: the table's form changed?", checked)
	}
}
