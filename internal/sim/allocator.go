package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
	"github.com/allot-dev/allot/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// allocator is the real allocator service over the real memory store, on
// the store's clock. It can restart (the store, Redis in a real fleet,
// keeps its state; the service's own state is lost) and be cut off from
// its store.
type allocator struct {
	w     *World
	mem   *store.Memory
	st    *cutStore
	srv   *server.Server
	down  []span // restarting: calls are refused
	storm []span // cut off from its store
}

func newAllocator(w *World) *allocator {
	a := &allocator{w: w, mem: store.NewMemory(w.store)}
	a.st = &cutStore{Store: a.mem, a: a}
	a.restart()
	return a
}

func (a *allocator) restart() {
	srv, err := server.New(server.Config{Store: a.st, Rules: a.w.rules, Clock: a.w.store, Logger: quiet, NewKeysPerNode: -1})
	if err != nil {
		panic(fmt.Sprintf("sim: allocator: %v", err))
	}
	a.srv = srv
}

func (a *allocator) close() { a.mem.Close() }

func (a *allocator) setRules(set *rules.Set) { a.srv.SetRules(set) }

func in(spans []span, t time.Duration) bool {
	for _, s := range spans {
		if t >= s.from && t < s.to {
			return true
		}
	}
	return false
}

var errRestarting = status.Error(codes.Unavailable, "allocator restarting")

func (a *allocator) acquire(req *allotv1.AcquireRequest) (*allotv1.AcquireResponse, error) {
	if in(a.down, a.w.now) {
		return nil, errRestarting
	}
	return a.srv.Acquire(context.Background(), req)
}

// rules is a node's GetRules as it starts: the allocator counts it live
// and answers its count of live nodes.
func (a *allocator) rules(node string) (int, error) {
	if in(a.down, a.w.now) {
		return 0, errRestarting
	}
	resp, err := a.srv.GetRules(context.Background(), &allotv1.GetRulesRequest{NodeId: node})
	return int(resp.GetNodes()), err
}

func (a *allocator) release(req *allotv1.ReleaseRequest) error {
	if in(a.down, a.w.now) {
		return errRestarting
	}
	_, err := a.srv.Release(context.Background(), req)
	return err
}

func (a *allocator) check(req *allotv1.CheckRequest) (*allotv1.CheckResponse, error) {
	if in(a.down, a.w.now) {
		return nil, errRestarting
	}
	return a.srv.Check(context.Background(), req)
}

// cutStore is the store as the allocator reaches it: unavailable while a
// fault cuts them apart. It tells the oracle what the store decided on
// (Oracle.StoreDecided): every request it applied (seqs is each holder's
// last, to tell a retry answered again), every return and every check.
type cutStore struct {
	store.Store
	a    *allocator
	seqs map[seqID]int64
}

type seqID struct{ node, rule, key string }

// decided tells the oracle the store decided on rule's key now.
func (s *cutStore) decided(r *rules.Rule, key string) {
	w := s.a.w
	w.oracle.StoreDecided(w.now, w.store.at(w.now), r.Base().Name, key)
}

func (s *cutStore) cut() error {
	if in(s.a.storm, s.a.w.now) {
		return fmt.Errorf("%w: cut off from the store", store.ErrUnavailable)
	}
	return nil
}

func (s *cutStore) Acquire(ctx context.Context, reqs []store.AcquireRequest) ([]store.Lease, error) {
	if err := s.cut(); err != nil {
		return nil, err
	}
	got, err := s.Store.Acquire(ctx, reqs)
	if err != nil {
		return got, err
	}
	if s.seqs == nil {
		s.seqs = map[seqID]int64{}
	}
	for _, r := range reqs {
		id := seqID{r.Node, r.Rule.Base().Name, r.Key}
		if r.Seq != 0 && s.seqs[id] == r.Seq {
			continue // answered again, not applied
		}
		s.seqs[id] = r.Seq
		s.decided(r.Rule, r.Key)
	}
	return got, nil
}

func (s *cutStore) Release(ctx context.Context, rets []store.Return) error {
	if err := s.cut(); err != nil {
		return err
	}
	if err := s.Store.Release(ctx, rets); err != nil {
		return err
	}
	for _, r := range rets {
		s.decided(r.Rule, r.Key)
	}
	return nil
}

func (s *cutStore) Check(ctx context.Context, r *rules.Rule, key string, cost int64) (store.Decision, error) {
	if err := s.cut(); err != nil {
		return store.Decision{}, err
	}
	d, err := s.Store.Check(ctx, r, key, cost)
	if err == nil {
		s.decided(r, key)
	}
	return d, err
}
