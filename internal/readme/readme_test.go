package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// exampleFiles hold the documentation's snippets as the bodies of functions.
var exampleFiles = []string{
	"../../client/readme_example_test.go",
	"../../client/grpclimit/readme_example_test.go",
	"../../client/httplimit/readme_example_test.go",
	"../../client/idempotency/readme_example_test.go",
	"example_test.go",
}

var goBlock = regexp.MustCompile("(?ms)^([ \t]*)```go\n(.*?)^[ \t]*```")

// pages are the README and every page of docs/, as paths from this
// directory.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no page found in docs/")
	}
	return append([]string{"../../README.md"}, docs...)
}

// Every Go snippet of the README and of docs/ appears, line by line
// (indentation aside), in one of the example files, so that what a new
// user copies compiles and passes vet. (The README's first example once
// read `client.RuleKey{"burst", user}`, unkeyed fields go vet refuses, and
// `...` where code belongs.)
func TestREADMESnippetsAreCompiledExamples(t *testing.T) {
	var examples []string
	for _, f := range exampleFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, lines(string(b))...)
	}
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlock.FindAllStringSubmatch(string(text), -1)
		if len(blocks) == 0 && page == "../../README.md" {
			t.Fatal("no Go snippet found in the README")
		}
		for _, b := range blocks {
			snippet := lines(b[2])
			if !contains(examples, snippet) {
				t.Errorf("a snippet of %s is in no example file (%s); make it the body of a function there:\n%s",
					filepath.Base(page), strings.Join(base(exampleFiles), ", "), b[2])
			}
		}
	}
}

// lines are s's lines without their indentation and with each run of
// blanks one space (gofmt aligns comments in the file, not in the README),
// blank lines dropped.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// contains reports whether want is a run of consecutive lines of have.
func contains(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		match := true
		for j := range want {
			if have[i+j] != want[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func base(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p)
	}
	return out
}
