package server_test

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/allot-dev/allot/internal/rules"
	"github.com/allot-dev/allot/internal/server"
)

// rawCodec sends and receives bytes as they are: a client that writes any
// bytes it likes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// leaseRequest is an AcquireRequest with one LeaseRequest, encoded by hand:
// the protobuf library will not encode a string that is not UTF-8.
func leaseRequest(node, rule, key string) []byte {
	var lr []byte
	lr = protowire.AppendTag(lr, 1, protowire.BytesType)
	lr = protowire.AppendString(lr, rule)
	lr = protowire.AppendTag(lr, 2, protowire.BytesType)
	lr = protowire.AppendString(lr, key)
	lr = protowire.AppendTag(lr, 3, protowire.VarintType)
	lr = protowire.AppendVarint(lr, 1)
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, node)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, lr)
}

// serveRaw runs the Allocator and health services the way the allocator
// does and returns a connection to them.
func serveRaw(t *testing.T) *grpc.ClientConn {
	t.Helper()
	set, err := rules.Parse("test", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: memory(t), Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(server.DecodeOptions()...)
	srv.Register(g)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestUndecodableRequests: a request that does not decode is the caller's
// fault, InvalidArgument, on every service of the server, unary or stream;
// grpc-go alone answers Internal.
func TestUndecodableRequests(t *testing.T) {
	conn := serveRaw(t)
	cases := []struct {
		name, method string
		body         []byte
	}{
		{"malformed protobuf", "/allot.v1.Allocator/Acquire", []byte{0x0a, 0xff, 0xff}},
		{"key not UTF-8", "/allot.v1.Allocator/Acquire", leaseRequest("n", "tb", "bad\xff\xfekey")},
		{"node not UTF-8", "/allot.v1.Allocator/Acquire", leaseRequest("n\xff", "tb", "k")},
		{"check key not UTF-8", "/allot.v1.Allocator/Check", []byte("\x0a\x02tb\x12\x02\xff\xfe")},
		{"health check", "/grpc.health.v1.Health/Check", []byte("\x0a\x02\xff\xfe")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reply []byte
			err := conn.Invoke(ctx(t), tc.method, &tc.body, &reply)
			wantStatus(t, err, codes.InvalidArgument, "request")
		})
	}
	t.Run("health watch", func(t *testing.T) {
		desc := &grpc.StreamDesc{ServerStreams: true}
		s, err := conn.NewStream(ctx(t), desc, "/grpc.health.v1.Health/Watch")
		if err != nil {
			t.Fatal(err)
		}
		body := []byte("\x0a\x02\xff\xfe")
		if err := s.SendMsg(&body); err != nil {
			t.Fatal(err)
		}
		s.CloseSend()
		var reply []byte
		wantStatus(t, s.RecvMsg(&reply), codes.InvalidArgument, "request")
	})
	// A well-formed request still passes.
	ok := leaseRequest("n", "tb", "k")
	var reply []byte
	if err := conn.Invoke(ctx(t), "/allot.v1.Allocator/Acquire", &ok, &reply); err != nil {
		t.Fatalf("a well-formed request: %v", err)
	}
}
