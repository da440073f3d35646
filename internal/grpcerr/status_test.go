package grpcerr

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestNewCarriesDetails(t *testing.T) {
	err := New(codes.ResourceExhausted, "slow down",
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "slow down" {
		t.Fatalf("status %v %q, want ResourceExhausted %q", st.Code(), st.Message(), "slow down")
	}
	ds := st.Details()
	if len(ds) != 1 {
		t.Fatalf("details %v, want one RetryInfo", ds)
	}
	ri, ok := ds[0].(*errdetails.RetryInfo)
	if !ok || ri.GetRetryDelay().AsDuration() != 2*time.Second {
		t.Fatalf("detail %v, want RetryInfo of 2s", ds[0])
	}
}

func TestNewWithoutDetails(t *testing.T) {
	st := status.Convert(New(codes.Internal, "store error"))
	if st.Code() != codes.Internal || st.Message() != "store error" || len(st.Details()) != 0 {
		t.Fatalf("status %v %q %v, want Internal %q and no details", st.Code(), st.Message(), st.Details(), "store error")
	}
}

// An OK status takes no details and is no error; New does not invent one.
func TestNewOK(t *testing.T) {
	if err := New(codes.OK, "", &errdetails.RetryInfo{}); err != nil {
		t.Fatalf("New(OK) = %v, want nil", err)
	}
}

func TestInvalidNamesField(t *testing.T) {
	st := status.Convert(Invalid("requests[3].key", "is %d bytes, at most %d", 600, 512))
	if want := "requests[3].key: is 600 bytes, at most 512"; st.Code() != codes.InvalidArgument || st.Message() != want {
		t.Fatalf("status %v %q, want InvalidArgument %q", st.Code(), st.Message(), want)
	}
	ds := st.Details()
	if len(ds) != 1 {
		t.Fatalf("details %v, want one BadRequest", ds)
	}
	br, ok := ds[0].(*errdetails.BadRequest)
	if !ok || len(br.GetFieldViolations()) != 1 {
		t.Fatalf("detail %v, want a BadRequest of one violation", ds[0])
	}
	v := br.GetFieldViolations()[0]
	if v.GetField() != "requests[3].key" || v.GetDescription() != "is 600 bytes, at most 512" {
		t.Fatalf("violation %q %q, want the field and the message without it", v.GetField(), v.GetDescription())
	}
}
