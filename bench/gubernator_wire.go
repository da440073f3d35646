package main

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Gubernator's gRPC messages, encoded by hand so that the bench talks to
// the daemons without importing Gubernator (which would put it and its
// dependencies in Allot's go.mod). The field numbers are those of
// gubernator.proto (package pb.gubernator) in v2.13.0; fields the bench
// does not use are not encoded, and are skipped when decoded.

const (
	gubernatorGetRateLimits = "/pb.gubernator.V1/GetRateLimits"
	gubernatorHealthCheck   = "/pb.gubernator.V1/HealthCheck"
)

// gubernatorAlgorithm is pb.gubernator.Algorithm.
type gubernatorAlgorithm int32

const (
	gubernatorTokenBucket gubernatorAlgorithm = 0 // TOKEN_BUCKET: limit per duration, all back when the duration ends
	gubernatorLeakyBucket gubernatorAlgorithm = 1 // LEAKY_BUCKET: limit/duration a second, up to burst
)

// gubernatorBehavior is pb.gubernator.Behavior, a set of flags.
type gubernatorBehavior int32

const (
	gubernatorBatching gubernatorBehavior = 0 // the default: forwarded to the key's owner, batched
	gubernatorGlobal   gubernatorBehavior = 2 // GLOBAL: answered from a local copy, hits sent to the owner later
)

// rateLimitReq is pb.gubernator.RateLimitReq, the fields the bench sets.
type rateLimitReq struct {
	name, uniqueKey string
	hits            int64
	limit           int64
	durationMs      int64
	algorithm       gubernatorAlgorithm
	behavior        gubernatorBehavior
	burst           int64
}

// rateLimitResp is pb.gubernator.RateLimitResp without its metadata.
type rateLimitResp struct {
	overLimit bool // status OVER_LIMIT (1); UNDER_LIMIT is 0
	limit     int64
	remaining int64
	resetTime int64 // Unix milliseconds
	err       string
}

// appendRateLimitReq appends r as one element of GetRateLimitsReq.requests
// (field 1).
func appendRateLimitReq(b []byte, r rateLimitReq) []byte {
	var m []byte
	m = appendString(m, 1, r.name)
	m = appendString(m, 2, r.uniqueKey)
	m = appendInt(m, 3, r.hits)
	m = appendInt(m, 4, r.limit)
	m = appendInt(m, 5, r.durationMs)
	m = appendInt(m, 6, int64(r.algorithm))
	m = appendInt(m, 7, int64(r.behavior))
	m = appendInt(m, 8, r.burst)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// appendString and appendInt leave out zero values, as proto3 does.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendInt(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// decodeRateLimitsResp reads GetRateLimitsResp: its responses, field 1.
func decodeRateLimitsResp(b []byte) ([]rateLimitResp, error) {
	var out []rateLimitResp
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		r, err := decodeRateLimitResp(v)
		out = append(out, r)
		return err
	})
	return out, err
}

func decodeRateLimitResp(b []byte) (rateLimitResp, error) {
	var r rateLimitResp
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			r.overLimit = n == 1
		case num == 2 && typ == protowire.VarintType:
			r.limit = int64(n)
		case num == 3 && typ == protowire.VarintType:
			r.remaining = int64(n)
		case num == 4 && typ == protowire.VarintType:
			r.resetTime = int64(n)
		case num == 5 && typ == protowire.BytesType:
			r.err = string(v)
		}
		return nil
	})
	return r, err
}

// healthCheckResp is pb.gubernator.HealthCheckResp.
type healthCheckResp struct {
	status, message string
	peerCount       int32
}

func decodeHealthCheckResp(b []byte) (healthCheckResp, error) {
	var h healthCheckResp
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			h.status = string(v)
		case num == 2 && typ == protowire.BytesType:
			h.message = string(v)
		case num == 3 && typ == protowire.VarintType:
			h.peerCount = int32(n)
		}
		return nil
	})
	return h, err
}

// eachField calls f with every field of a message: a varint's value in n,
// a length-delimited field's bytes in v. Other wire types are skipped.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// wireMsg is a message already encoded: what wireCodec sends and receives.
type wireMsg struct{ b []byte }

// wireCodec passes encoded messages through gRPC as they are. It is named
// "proto" so that the calls carry application/grpc+proto, which is what
// the daemons' protobuf codec answers.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*wireMsg)
	if !ok {
		return nil, fmt.Errorf("wireCodec: cannot send %T", v)
	}
	return m.b, nil
}

func (wireCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*wireMsg)
	if !ok {
		return errors.New("wireCodec: can only receive into *wireMsg")
	}
	m.b = append(m.b[:0], data...) // data is not ours to keep
	return nil
}
