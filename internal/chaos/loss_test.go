package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// acquireMethod is the full gRPC name of Acquire.
var acquireMethod = "/" + allotv1.Allocator_ServiceDesc.ServiceName + "/Acquire"

// replyLoss loses the replies of some Acquire calls: the call reaches the
// allocator, which applies it, and the node hears DeadlineExceeded when
// its deadline ends, as when the answer is lost on the way back. It also
// watches what the nodes send next: a request whose answer was lost should
// come again with its sequence number, to be answered without being
// applied twice.
type replyLoss struct {
	every int64 // one reply in every lost while on
	on    atomic.Bool
	calls atomic.Int64
	lost  atomic.Int64

	mu      sync.Mutex
	pending map[string]uint64 // node/rule/key -> seq of a request whose reply was lost
	resent  int64             // requests sent again with a lost one's seq
}

func newReplyLoss(every int64) *replyLoss {
	return &replyLoss{every: every, pending: make(map[string]uint64)}
}

func (l *replyLoss) dialOption() grpc.DialOption { return grpc.WithChainUnaryInterceptor(l.intercept) }

func (l *replyLoss) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ar, isAcquire := req.(*allotv1.AcquireRequest)
	if isAcquire {
		l.sawRequest(ar)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil || !isAcquire || method != acquireMethod || !l.on.Load() || l.calls.Add(1)%l.every != 0 {
		return err
	}
	l.lost.Add(1)
	l.mu.Lock()
	for _, r := range ar.GetRequests() {
		if r.GetSeq() != 0 {
			l.pending[key(ar.GetNodeId(), r)] = r.GetSeq()
		}
	}
	l.mu.Unlock()
	// The node waits for an answer that never comes.
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second): // a call without a deadline: not the SDK's
	}
	return status.Error(codes.DeadlineExceeded, "chaos: the reply was lost")
}

// sawRequest counts the requests that repeat one whose reply was lost.
func (l *replyLoss) sawRequest(ar *allotv1.AcquireRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range ar.GetRequests() {
		k := key(ar.GetNodeId(), r)
		if seq, ok := l.pending[k]; ok {
			if r.GetSeq() == seq {
				l.resent++
			}
			delete(l.pending, k)
		}
	}
}

func (l *replyLoss) resends() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resent
}

func key(node string, r *allotv1.LeaseRequest) string {
	return fmt.Sprintf("%s/%s/%s", node, r.GetRule(), r.GetKey())
}
