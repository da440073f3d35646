package allocator_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/allot-dev/allot/internal/allocator"
)

// rawCodec sends bytes as they are, as a broken or hostile client may.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A request that does not decode is the caller's fault: InvalidArgument,
// not Internal (grpc-go's answer without server.DecodeOptions).
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	_, conn := start(t, allocator.Config{})
	for _, tc := range []struct {
		name, why string
		body      []byte
	}{
		{"malformed protobuf", "invalid wire-format", []byte{0x0a, 0xff, 0xff}},
		{"key not UTF-8", "UTF-8", []byte("\x0a\x0bapi-per-key\x12\x08bad\xff\xfekey\x18\x01")},
	} {
		var reply []byte
		err := conn.Invoke(ctx(t), "/allot.v1.Allocator/Check", &tc.body, &reply, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v, want InvalidArgument saying %s", tc.name, err, tc.why)
		}
	}
}
