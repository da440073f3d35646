package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file loads a directory of envoyproxy/ratelimit config files as they
// are: the RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml layout, one
// domain per file (domain, descriptors at the top level), so that a
// deployment moving from envoyproxy/ratelimit mounts the same ConfigMap
// or directory instead of wrapping every file into an envoy section.

// WithEnvoyDir returns set with the domains of every *.yaml (or *.yml)
// file in dir added to its envoy section, in file name order after the
// section's own. Each file is one envoyproxy/ratelimit config file; errors
// name the file, the line and the field by its path in that file
// ("descriptors[0].rate_limit.unit"). Names starting with '.' are skipped:
// they are editors' files and the "..data" links of a Kubernetes volume,
// whose targets the visible names already link to. A domain given twice,
// in two files or in a file and the section, is an error, as it is in
// envoyproxy/ratelimit. A directory holding no such file is an error: an
// empty mount that loaded as "no limits" would be silently unlimited.
func WithEnvoyDir(set *Set, dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rules: envoy config directory: %w", err)
	}
	base := set.envoy
	e := &Envoy{domains: make(map[string]*EnvoyDomain)}
	where := make(map[string]string) // domain -> where it was given, for duplicates
	digest := sha256.New()
	if base != nil {
		e.Headers = base.Headers
		for _, name := range base.order {
			e.domains[name] = base.domains[name]
			where[name] = "the rules file's envoy section"
		}
		e.order = append(e.order, base.order...)
		fmt.Fprintf(digest, "section %s\n", base.digest)
	} else {
		fmt.Fprintf(digest, "headers %d\n", e.Headers)
	}
	names := make(map[string]string)
	files := 0
	for _, ent := range entries {
		name := ent.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		info, err := os.Stat(path) // through links, as a mounted volume's are
		if err != nil {
			return nil, fmt.Errorf("rules: envoy config directory: %w", err) // a link to nothing: a file meant to be read
		}
		if !info.Mode().IsRegular() {
			continue // a directory named *.yaml: not a config file
		}
		files++
		dom, line, err := envoyFile(path, set, names, digest)
		if err != nil {
			return nil, err
		}
		if other, dup := where[dom.Name]; dup {
			return nil, &FieldError{File: path, Line: line, Field: "domain",
				Msg: fmt.Sprintf("domain %q is given twice (also in %s)", dom.Name, other)}
		}
		where[dom.Name] = fmt.Sprintf("%s:%d", path, line)
		e.domains[dom.Name] = dom
		e.order = append(e.order, dom.Name)
	}
	if files == 0 {
		return nil, &FieldError{File: dir, Field: "domain",
			Msg: "the envoy config directory holds no *.yaml file (one envoyproxy/ratelimit config file per domain)"}
	}
	e.digest = hex.EncodeToString(digest.Sum(nil))
	out := &Set{byName: set.byName, list: set.list, envoy: e}
	out.version = out.hash()
	return out, nil
}

// envoyFile parses one envoyproxy/ratelimit config file: one YAML
// document whose top level is a domain. It returns the domain and the
// line of its domain field.
func envoyFile(path string, set *Set, names map[string]string, digest hash.Hash) (*EnvoyDomain, int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("rules: %w", err)
	}
	docs, err := decodeAll(data)
	if err != nil {
		return nil, 0, syntaxError(path, data, err)
	}
	switch {
	case len(docs) == 0:
		return nil, 0, &FieldError{File: path, Field: "domain", Msg: "the file is empty (want domain and descriptors)"}
	case len(docs) > 1:
		return nil, 0, &FieldError{File: path, Line: docs[1].Line, Field: "domain",
			Msg: "a second YAML document: each file holds one domain"}
	}
	root := docs[0]
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = deref(root.Content[0])
	}
	p := &parser{file: path}
	ep := &envoyParse{p: p, set: set, names: names}
	ep.digest = sha256.New()
	dom, err := ep.domain("", root)
	if err != nil {
		return nil, 0, err
	}
	fmt.Fprintf(digest, "file %s\n", hex.EncodeToString(ep.digest.Sum(nil)))
	return dom, domainLine(root), nil
}

// domainLine is the line of a file's domain field, for duplicate errors.
func domainLine(root *yaml.Node) int {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if deref(root.Content[i]).Value == "domain" {
			return deref(root.Content[i+1]).Line
		}
	}
	return root.Line
}
