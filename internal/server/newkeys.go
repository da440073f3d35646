package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot-dev/allot/internal/grpcerr"
	"github.com/allot-dev/allot/internal/store"
)

// newKeys caps the keys each node may add to the store per second, so that
// one node (a bug, or an attacker with a node's identity) cannot fill it.
// Telling a new key from one the store holds takes a look at the store, so
// only a node that has sent more requests this second than half the cap is
// looked at: below that it cannot have added more. Beyond, its new keys
// are counted (store.Exister) and paid from a bucket of the other half of
// the cap a second; a call whose new keys the bucket cannot pay is refused
// as a whole with ResourceExhausted and a RetryInfo, and keys the node
// holds go on being served by its next calls. A node adds at most the cap
// a second, and one call more.
type newKeys struct {
	rate  float64 // new keys a second per node; 0: no cap
	mu    sync.Mutex
	nodes map[string]*nodeKeys
	swept time.Time
}

type nodeKeys struct {
	second int64   // the second items counts
	items  int     // requests this second
	tokens float64 // new keys the node may still add
	at     time.Time
}

// DefaultNewKeysPerNode is the cap's default: about 20 MB/s of Redis at
// ~200 B a key, and above what a node of a long-tail workload adds: a key
// whose state expired between two of its requests (its bucket full again,
// its leases over) is new to the store each time, and a node serving a
// million Zipf keys at 5,000 requests a second recreates thousands a second
// (the bench's keys scenario; at 10,000 a second the calls it refused cost
// a tenth of the admissions).
const DefaultNewKeysPerNode = 100_000

func newNewKeys(rate float64) *newKeys {
	return &newKeys{rate: rate, nodes: make(map[string]*nodeKeys)}
}

// watch counts n requests of node and reports whether its new keys must be
// counted: it has sent more than the cap this second.
func (k *newKeys) watch(node string, n int, now time.Time) bool {
	if k.rate <= 0 {
		return false
	}
	half := k.rate / 2
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sweep(now)
	nk := k.node(node, now)
	if sec := now.Unix(); sec != nk.second {
		nk.second, nk.items = sec, 0
	}
	nk.items += n
	return float64(nk.items) > half
}

// take pays for fresh new keys of node; false when its bucket cannot, with
// how long until it can. A call of more new keys than a second's worth
// passes on a full bucket and leaves it in debt, which the node's next
// calls wait out: the rate holds on average, and no call is refused for
// ever.
func (k *newKeys) take(node string, fresh int, now time.Time) (bool, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	nk := k.node(node, now)
	half := k.rate / 2
	nk.tokens = min(half, nk.tokens+half*now.Sub(nk.at).Seconds())
	nk.at = now
	need := min(float64(fresh), half)
	if need <= nk.tokens {
		nk.tokens -= float64(fresh)
		return true, 0
	}
	return false, time.Duration((need - nk.tokens) / half * float64(time.Second))
}

func (k *newKeys) node(node string, now time.Time) *nodeKeys {
	nk := k.nodes[node]
	if nk == nil {
		nk = &nodeKeys{tokens: k.rate / 2, at: now}
		k.nodes[node] = nk
	}
	return nk
}

// sweep forgets, every ten seconds, the nodes whose bucket has filled and
// whose count is of an earlier second: they are as new.
func (k *newKeys) sweep(now time.Time) {
	if now.Sub(k.swept) < 10*time.Second {
		return
	}
	k.swept = now
	for name, nk := range k.nodes {
		if nk.second < now.Unix() && nk.tokens+k.rate/2*now.Sub(nk.at).Seconds() >= k.rate/2 {
			delete(k.nodes, name)
		}
	}
}

// checkNewKeys refuses an Acquire of a node that adds keys faster than the
// cap allows.
func (s *Server) checkNewKeys(ctx context.Context, node string, reqs []store.AcquireRequest) error {
	ex, ok := s.store.(store.Exister)
	now := time.Now()
	if !ok || !s.newKeys.watch(node, len(reqs), now) {
		return nil
	}
	exists, err := ex.Exists(ctx, reqs)
	if err != nil {
		return s.storeError(ctx, "acquire", err)
	}
	fresh, first := 0, -1
	for i, e := range exists {
		if !e {
			fresh++
			if first < 0 {
				first = i
			}
		}
	}
	if fresh == 0 {
		return nil
	}
	ok, wait := s.newKeys.take(node, fresh, now)
	if ok {
		return nil
	}
	s.metrics.refusedNewKeys()
	return grpcerr.New(codes.ResourceExhausted, fmt.Sprintf(
		"requests[%d].key: node %q adds keys faster than the allocator allows (%g new keys a second a node, --max-new-keys-per-node); %d of this call's keys are new; keys it holds are served; ask again in %v",
		first, node, s.newKeys.rate, fresh, wait.Round(time.Millisecond)),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
}
