package readme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link is a markdown link or image: [text](target), the target without a
// title.
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// Every relative link of the README and of docs/ points at a file that
// exists and, with a #fragment, at a heading of that page, so that a page
// moved or a heading renamed breaks here rather than for a reader.
func TestLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(text)) {
			if err := resolve(page, target); err != nil {
				t.Errorf("%s: link %s: %v", filepath.Base(page), target, err)
			}
		}
	}
}

// links are the targets of text's links outside code, external ones left
// out.
func links(text string) []string {
	var out []string
	for _, l := range prose(text) {
		for _, m := range link.FindAllStringSubmatch(stripCode(l), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, target)
		}
	}
	return out
}

// resolve checks target, a link of page.
func resolve(page, target string) error {
	path, fragment, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		file = filepath.Join(filepath.Dir(page), path)
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("no such file %s", path)
		}
	}
	if fragment == "" {
		return nil
	}
	if !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("a fragment on a file that is not markdown")
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if !anchors(string(text))[fragment] {
		return fmt.Errorf("%s has no heading #%s", filepath.Base(file), fragment)
	}
	return nil
}

// anchors are the fragments GitHub gives text's headings: lower case,
// punctuation dropped, spaces as hyphens, a repeated one numbered.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(l, "#"))
		slug := strings.ReplaceAll(punctuation.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

var punctuation = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// prose is text's lines outside fenced code blocks.
func prose(text string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return out
}

// stripCode drops a line's code spans, whose brackets are not links.
func stripCode(l string) string {
	parts := strings.Split(l, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		}
	}
	return b.String()
}
