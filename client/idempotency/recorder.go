package idempotency

import (
	"net/http"
)

// recorder passes a handler's response through to the client and keeps a
// copy for the store: the status, the header fields as they were when the
// status was written, and the body up to max bytes. Past max it stops
// copying and marks the response truncated; the client still gets all of
// it.
type recorder struct {
	http.ResponseWriter
	max       int
	status    int
	header    http.Header
	body      []byte
	truncated bool
}

func newRecorder(w http.ResponseWriter, max int) *recorder {
	return &recorder{ResponseWriter: w, max: max}
}

// WriteHeader records the final status; 1xx informational answers pass
// through unrecorded.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.status = code
		r.header = storedHeader(r.ResponseWriter.Header())
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.truncated {
		if len(r.body)+len(p) > r.max {
			r.truncated, r.body = true, nil
		} else {
			r.body = append(r.body, p...)
		}
	}
	return r.ResponseWriter.Write(p)
}

// Flush passes a flush through, for streaming handlers.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// record is what the handler answered, as the store keeps it.
func (r *recorder) record(fingerprint string) *Record {
	status := r.status
	if status == 0 { // the handler wrote nothing: net/http sends 200
		status, r.header = http.StatusOK, storedHeader(r.ResponseWriter.Header())
	}
	return &Record{Fingerprint: fingerprint, Status: status, Header: r.header, Body: r.body, Truncated: r.truncated}
}

// unstored are header fields a replay must not repeat: those of one
// connection or one message (RFC 9110 §7.6.1), and Date, which the replay
// gets anew.
var unstored = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding",
	"Upgrade", "Te", "Trailer", "Date"}

func storedHeader(h http.Header) http.Header {
	c := h.Clone()
	for _, k := range unstored {
		delete(c, k)
	}
	if len(c) == 0 {
		return nil
	}
	return c
}
