package fallback

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/hashicorp/memberlist"
)

// ReadKeyring reads a gossip keyring file: one base64 key of 16, 24 or 32
// bytes (AES-128, -192, -256) a line, the first one the primary key that
// encrypts; the others are only accepted, for a rotation. Blank lines and
// lines starting with # are skipped. `openssl rand -base64 32` makes a key.
func ReadKeyring(file string) ([][]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("fallback: gossip keyring: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("fallback: gossip keyring %s:%d: not base64: %v", file, i+1, err)
		}
		if err := memberlist.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("fallback: gossip keyring %s:%d: %d bytes: want 16, 24 or 32", file, i+1, len(key))
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("fallback: gossip keyring %s: no key in it", file)
	}
	return keys, nil
}

func checkKeys(keys [][]byte) error {
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("fallback: gossip: Keys[%d] is %d bytes: want 16, 24 or 32", i, len(k))
		}
	}
	return nil
}

// newKeyring makes the keyring of keys, keys[0] the primary.
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	return memberlist.NewKeyring(keys[1:], keys[0])
}

// SetKeys replaces the gossip keys of a running member: keys[0] encrypts
// from now on, every key in keys is accepted, and keys no longer listed are
// dropped. A rotation is three rounds over the pool: add the new key as a
// second key everywhere, then make it the first everywhere, then drop the
// old one. It fails on a member started without keys: encryption cannot be
// turned on in a running pool.
func (g *Gossip) SetKeys(keys [][]byte) error {
	if g.keyring == nil {
		return errors.New("fallback: gossip: SetKeys: this member was started without keys")
	}
	if len(keys) == 0 {
		return errors.New("fallback: gossip: SetKeys: no key: encryption cannot be turned off in a running pool")
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	for _, k := range keys {
		if err := g.keyring.AddKey(k); err != nil {
			return fmt.Errorf("fallback: gossip: %w", err)
		}
	}
	if err := g.keyring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("fallback: gossip: %w", err)
	}
	for _, old := range g.keyring.GetKeys() {
		if !containsKey(keys, old) {
			if err := g.keyring.RemoveKey(old); err != nil {
				return fmt.Errorf("fallback: gossip: %w", err)
			}
		}
	}
	return nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// trusted reports whether an allocator advertising addr may be used: any,
// without patterns; else one that matches a pattern (path.Match syntax,
// e.g. "10.0.3.*:7070" or "alloc-*.prod.internal:7070").
func trusted(patterns []string, addr string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, addr); ok {
			return true
		}
	}
	return false
}

func checkPatterns(patterns []string) error {
	for i, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("fallback: gossip: TrustAllocators[%d] %q: %v", i, p, err)
		}
	}
	return nil
}
