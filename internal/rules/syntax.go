package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// decodeAll decodes every YAML document in data. A document with nothing
// in it (a trailing "---", or only comments) holds nothing to ignore and
// is left out.
func decodeAll(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		if !empty(&doc) {
			docs = append(docs, &doc)
		}
	}
}

// empty is a document with no node at all: yaml.v3 gives it a null scalar
// with no text (an explicit "~" or "null" has text, and is not empty).
func empty(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return len(doc.Content) == 1 && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == ""
}

// yamlLine is how yaml.v3 prefixes its messages: "yaml: line 5: ...".
var yamlLine = regexp.MustCompile(`^yaml: (line \d+: )?`)

func problem(err error) string { return yamlLine.ReplaceAllString(err.Error(), "") }

// syntaxError names the line of a YAML syntax error. yaml.v3 reports the
// line where the block around the problem began (often line 1, the
// top-level mapping), not the problem's own, and keeps the latter to
// itself. So the line is found again here: the shortest run of the file's
// first lines that fails with the same problem ends on it. The parser
// reads forwards and the problem does not depend on what follows it, so a
// binary search finds that run; the cost is paid only on a broken file.
func syntaxError(file string, data []byte, err error) error {
	want := problem(err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		_, err := decodeAll(bytes.Join(lines[:n], nil))
		return err != nil && problem(err) == want
	}
	lo, hi := 1, len(lines) // the whole file fails
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return fmt.Errorf("%s:%d: YAML syntax: %s", file, lo, want)
}
