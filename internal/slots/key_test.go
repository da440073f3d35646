package slots

import "testing"

func BenchmarkTakeGive(b *testing.B) {
	k := newKey()
	k.setCap(10, ModeLease)
	b.ReportAllocs()
	for b.Loop() {
		if !k.Take() {
			b.Fatal("refused")
		}
		k.Give()
	}
}

func BenchmarkLookup(b *testing.B) {
	m := newKeyMap()
	k := newKey()
	k.st.name = "user-42"
	m.store(k)
	b.ReportAllocs()
	for b.Loop() {
		if m.load("user-42") != k {
			b.Fatal("missing")
		}
	}
}
