package fallback

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func member(t *testing.T, cfg GossipConfig) (*Gossip, error) {
	t.Helper()
	cfg.Fast = true
	g, err := Join(cfg)
	if err == nil {
		t.Cleanup(func() { g.Stop() })
	}
	return g, err
}

func mustMember(t *testing.T, cfg GossipConfig) *Gossip {
	t.Helper()
	g, err := member(t, cfg)
	if err != nil {
		t.Fatalf("%s: %v", cfg.Name, err)
	}
	return g
}

// With a key, a member without it (or with another) cannot join, and a
// rogue "allocator" never reaches the nodes' allocator lists.
func TestGossipKeyKeepsOutsidersOut(t *testing.T) {
	key := newKey(t)
	node := mustMember(t, GossipConfig{Name: "node-1", Keys: [][]byte{key}})
	mustMember(t, GossipConfig{Name: "allocator-good", Role: RoleAllocator, GRPC: "127.0.0.1:7070",
		Keys: [][]byte{key}, Join: []string{node.Addr()}})

	outsiders := []GossipConfig{
		{Name: "rogue-clear", Role: RoleAllocator, GRPC: "127.0.0.1:6666"},
		{Name: "rogue-other-key", Role: RoleAllocator, GRPC: "127.0.0.1:6667", Keys: [][]byte{newKey(t)}},
		{Name: "node-clear", Role: RoleNode},
	}
	for _, cfg := range outsiders {
		cfg.Join = []string{node.Addr()}
		if _, err := member(t, cfg); err == nil {
			t.Errorf("%s joined a pool it has no key for", cfg.Name)
		} else {
			t.Logf("%s refused: %v", cfg.Name, err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return slices.Equal(node.Allocators(), []string{"127.0.0.1:7070"}) },
		"the keyed allocator in the node's list")
	if got := node.ml.NumMembers(); got != 2 {
		t.Fatalf("the pool has %d members, want 2 (the node and the keyed allocator)", got)
	}
	if node.Nodes() != 1 {
		t.Fatalf("the node counts %d nodes, want 1", node.Nodes())
	}
}

// A key is rotated in three rounds without splitting the pool: add the new
// key, make it primary, drop the old one. Afterwards only the new key joins.
func TestGossipKeyRotation(t *testing.T) {
	old, next := newKey(t), newKey(t)
	a := mustMember(t, GossipConfig{Name: "a", Keys: [][]byte{old}})
	b := mustMember(t, GossipConfig{Name: "b", Keys: [][]byte{old}, Join: []string{a.Addr()}})
	waitFor(t, 10*time.Second, func() bool { return a.Nodes() == 2 && b.Nodes() == 2 }, "a and b to see each other")

	rounds := [][][]byte{{old, next}, {next, old}, {next}}
	for i, keys := range rounds {
		for _, g := range []*Gossip{a, b} {
			if err := g.SetKeys(keys); err != nil {
				t.Fatalf("round %d: %v", i+1, err)
			}
		}
		// The pool still talks: a newcomer with every key of the round joins
		// and is seen by both.
		c := mustMember(t, GossipConfig{Name: "c" + string(rune('1'+i)), Keys: keys, Join: []string{b.Addr()}})
		waitFor(t, 10*time.Second, func() bool { return a.Nodes() == 3 && b.Nodes() == 3 }, "a newcomer seen after the round")
		if err := c.Leave(time.Second); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return a.Nodes() == 2 && b.Nodes() == 2 }, "the newcomer gone")
	}
	if _, err := member(t, GossipConfig{Name: "late-old-key", Keys: [][]byte{old}, Join: []string{a.Addr()}}); err == nil {
		t.Fatal("a member with the retired key joined")
	}
	if got := a.keyring.GetKeys(); len(got) != 1 || string(got[0]) != string(next) {
		t.Fatalf("a's keyring holds %d keys after the rotation, want only the new one", len(got))
	}
	if _, err := member(t, GossipConfig{Name: "new-key", Keys: [][]byte{next}, Join: []string{a.Addr()}}); err != nil {
		t.Fatalf("a member with the new key: %v", err)
	}
}

func TestGossipSetKeysErrors(t *testing.T) {
	clear := mustMember(t, GossipConfig{Name: "clear"})
	if err := clear.SetKeys([][]byte{newKey(t)}); err == nil || !strings.Contains(err.Error(), "without keys") {
		t.Errorf("SetKeys on a member without keys: %v", err)
	}
	keyed := mustMember(t, GossipConfig{Name: "keyed", Keys: [][]byte{newKey(t)}})
	if err := keyed.SetKeys(nil); err == nil {
		t.Error("SetKeys(nil) turned encryption off")
	}
	if err := keyed.SetKeys([][]byte{[]byte("short")}); err == nil || !strings.Contains(err.Error(), "Keys[0] is 5 bytes") {
		t.Errorf("a 5-byte key: %v", err)
	}
	if _, err := Join(GossipConfig{Name: "bad", Keys: [][]byte{make([]byte, 7)}}); err == nil {
		t.Error("Join accepted a 7-byte key")
	}
}

// Without a key, TrustAllocators still keeps allocators that advertise an
// address outside the fleet's off the list.
func TestGossipTrustAllocators(t *testing.T) {
	node := mustMember(t, GossipConfig{Name: "node", TrustAllocators: []string{"127.0.0.1:70*"}})
	for name, grpc := range map[string]string{"good": "127.0.0.1:7071", "rogue": "192.0.2.9:7070"} {
		mustMember(t, GossipConfig{Name: name, Role: RoleAllocator, GRPC: grpc, Join: []string{node.Addr()}})
	}
	waitFor(t, 10*time.Second, func() bool { return node.ml.NumMembers() == 3 }, "three members")
	if got := node.Allocators(); !slices.Equal(got, []string{"127.0.0.1:7071"}) {
		t.Fatalf("allocators %v, want only the one matching the pattern", got)
	}
	if _, err := Join(GossipConfig{Name: "x", TrustAllocators: []string{"["}}); err == nil || !strings.Contains(err.Error(), "TrustAllocators[0]") {
		t.Fatalf("a bad pattern: %v", err)
	}
}

func TestReadKeyring(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "keyring")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	k1, k2 := newKey(t), newKey(t)[:16]
	keys, err := ReadKeyring(write("# primary first\n" + base64.StdEncoding.EncodeToString(k1) + "\n\n" +
		base64.StdEncoding.EncodeToString(k2) + "\n"))
	if err != nil || len(keys) != 2 || string(keys[0]) != string(k1) || string(keys[1]) != string(k2) {
		t.Fatalf("ReadKeyring: %d keys, %v", len(keys), err)
	}
	for content, want := range map[string]string{
		"not base64!\n": "keyring:1: not base64",
		base64.StdEncoding.EncodeToString(k1) + "\n" + base64.StdEncoding.EncodeToString([]byte("seven!!")) + "\n": "keyring:2: 7 bytes",
		"# nothing\n": "no key",
	} {
		if _, err := ReadKeyring(write(content)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadKeyring(%q): %v, want an error with %q", content, err, want)
		}
	}
	if _, err := ReadKeyring(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file")
	}
}
