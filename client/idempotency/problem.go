package idempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// problem is an RFC 9457 problem details object, the body of every answer
// the middleware gives in the handler's stead.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func newProblem(status int, detail string) problem {
	return problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
}

func badKey(err error) problem { return newProblem(http.StatusBadRequest, err.Error()+".") }

func missingKey(header string) problem {
	return newProblem(http.StatusBadRequest, fmt.Sprintf("This request needs an %s header.", header))
}

func requestTooLarge(header string, max int64) problem {
	return newProblem(http.StatusRequestEntityTooLarge, fmt.Sprintf(
		"A request with an %s may carry at most %d bytes of body.", header, max))
}

func unreadable(err error) problem { return newProblem(http.StatusBadRequest, err.Error()+".") }

func keyReused(header string) problem {
	return newProblem(http.StatusUnprocessableEntity, fmt.Sprintf(
		"This %s was used for a different request (method, path, body or headers); use a new key for a new request.", header))
}

func inProgress(header string) problem {
	return newProblem(http.StatusConflict, fmt.Sprintf(
		"A request with this %s is still being processed; retry it later.", header))
}

func notKept(header string, max int) problem {
	return newProblem(http.StatusConflict, fmt.Sprintf(
		"The request with this %s was processed, but its response was larger than the %d bytes kept for a replay; it will not be processed again.", header, max))
}

func storeDown(header string) problem {
	return newProblem(http.StatusServiceUnavailable, fmt.Sprintf(
		"The store of %s values is unavailable, so the request was not processed; retry it later with the same key.", header))
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil { // a struct of strings and an int: cannot happen
		http.Error(w, p.Detail, p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
