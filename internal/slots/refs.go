package slots

import (
	"sync"
	"sync/atomic"
)

// Keys are numbered (Key.Ref), so that what points at one can hold a
// number in place of a pointer: the SDK's Slots are then memory the
// garbage collector never scans, which is most of what a slot taken and
// released costs. A number goes back to be reused when its key is dropped,
// which happens only with nothing in flight: no slot still in use names a
// number that has moved to another key.

const refChunk = 1024

type refTable struct {
	mu     sync.Mutex
	chunks atomic.Pointer[[]*[refChunk]atomic.Pointer[Key]]
	next   uint32
	free   []uint32
}

var refs refTable

func (t *refTable) add(k *Key) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ref uint32
	if n := len(t.free); n > 0 {
		ref, t.free = t.free[n-1], t.free[:n-1]
	} else {
		ref = t.next
		t.next++
	}
	cs := t.chunks.Load()
	if cs == nil || int(ref/refChunk) >= len(*cs) {
		var grown []*[refChunk]atomic.Pointer[Key]
		if cs != nil {
			grown = append(grown, *cs...)
		}
		grown = append(grown, new([refChunk]atomic.Pointer[Key]))
		t.chunks.Store(&grown)
		cs = &grown
	}
	(*cs)[ref/refChunk][ref%refChunk].Store(k)
	return ref
}

func (t *refTable) remove(ref uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	(*t.chunks.Load())[ref/refChunk][ref%refChunk].Store(nil)
	t.free = append(t.free, ref)
}

// ByRef is the key numbered ref, nil if none is.
func ByRef(ref uint32) *Key {
	cs := refs.chunks.Load()
	if cs == nil || int(ref/refChunk) >= len(*cs) {
		return nil
	}
	return (*cs)[ref/refChunk][ref%refChunk].Load()
}

// Ref is the key's number, for ByRef.
func (k *Key) Ref() uint32 { return k.ref }
