package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/allot-dev/allot/internal/grpcerr"

	// The "proto" codec that decodeCodec wraps.
	_ "google.golang.org/grpc/encoding/proto"
)

// A request that does not decode (malformed protobuf, a string that is not
// UTF-8) fails in grpc-go's codec, before any interceptor or handler, and
// grpc-go answers Internal whatever the codec's error says: it blames the
// allocator for the caller's fault. Under DecodeOptions the codec lets such
// a request through empty, marked with its decoding error in an unknown
// field, and interceptors answer a marked request InvalidArgument before
// any handler sees it. Were the interceptors missing, a handler would see an
// empty request, which validation refuses too.

// DecodeOptions are the gRPC server options that make a request that does
// not decode InvalidArgument, on every service of the server. Put them after
// the interceptors that should see that answer (metrics).
func DecodeOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(decodeCodec{encoding.GetCodecV2("proto")}),
		grpc.ChainUnaryInterceptor(rejectUndecodedUnary),
		grpc.ChainStreamInterceptor(rejectUndecodedStream),
	}
}

// markField carries the decoding error: the largest field number, which no
// message of ours uses.
const markField = protowire.MaxValidNumber

// decodeCodec is the proto codec, except that a request that does not
// decode is left empty and marked instead of failing.
type decodeCodec struct{ proto encoding.CodecV2 }

func (c decodeCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c decodeCodec) Name() string { return c.proto.Name() }

func (c decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.proto.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	mark := protowire.AppendTag(nil, markField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(mark, err.Error()))
	return nil
}

// undecoded is the InvalidArgument of a marked request, or nil.
func undecoded(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	raw := m.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 || num != markField || typ != protowire.BytesType {
		return nil
	}
	msg, n := protowire.ConsumeString(raw[n:])
	if n < 0 {
		return nil
	}
	return grpcerr.Invalid("request", "does not decode: %s", msg)
}

func rejectUndecodedUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := undecoded(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func rejectUndecodedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, checkedStream{ss})
}

// checkedStream refuses each received message that did not decode.
type checkedStream struct{ grpc.ServerStream }

func (s checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return undecoded(m)
}
