package idempotency

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
)

// A record, as the Redis store keeps it: a version byte, a flags byte, the
// status, the header fields (each a name and its values, every string
// length-prefixed with a uvarint), then the body to the end. The
// fingerprint is kept beside it, not in it.
const recordVersion = 1

const flagTruncated = 1

// encodeRecord is rec in the Redis store's form.
func encodeRecord(rec *Record) []byte {
	n := 2 + binary.MaxVarintLen64*2 + len(rec.Body)
	for k, vs := range rec.Header {
		n += len(k) + binary.MaxVarintLen64*2
		for _, v := range vs {
			n += len(v) + binary.MaxVarintLen64
		}
	}
	b := make([]byte, 0, n)
	var flags byte
	if rec.Truncated {
		flags |= flagTruncated
	}
	b = append(b, recordVersion, flags)
	b = binary.AppendUvarint(b, uint64(rec.Status))
	b = binary.AppendUvarint(b, uint64(len(rec.Header)))
	for k, vs := range rec.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, rec.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errBadRecord is what decodeRecord wraps: the stored bytes are not a
// record this version writes (another program's key under the prefix, or
// a corrupted value).
var errBadRecord = errors.New("stored record does not decode")

// decodeRecord reads a record that encodeRecord wrote. It never panics:
// every length is checked against what is left.
func decodeRecord(b []byte) (*Record, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than its header", errBadRecord, len(b))
	}
	if b[0] != recordVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errBadRecord, b[0], recordVersion)
	}
	d := decoder{b: b[2:]}
	rec := &Record{Truncated: b[1]&flagTruncated != 0}
	status := d.uvarint("status")
	if d.err == nil && (status < 100 || status > 999) {
		d.err = fmt.Errorf("%w: status %d", errBadRecord, status)
	}
	rec.Status = int(status)
	fields := d.count("header count")
	if fields > 0 {
		rec.Header = make(http.Header, fields)
	}
	for i := 0; i < fields && d.err == nil; i++ {
		k := d.string("header name")
		nv := d.count("header values")
		vs := make([]string, 0, nv)
		for j := 0; j < nv && d.err == nil; j++ {
			vs = append(vs, d.string("header value"))
		}
		rec.Header[k] = vs
	}
	if d.err != nil {
		return nil, d.err
	}
	rec.Body = d.b
	return rec, nil
}

// decoder reads uvarints and strings from b, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad %s", errBadRecord, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a length or a number of items, each at least a byte: more than
// the bytes left is corrupt, and checking it first bounds what is made.
func (d *decoder) count(what string) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s %d beyond the %d bytes left", errBadRecord, what, v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) string(what string) string {
	n := d.count(what + " length")
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
