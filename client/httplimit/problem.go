package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ProblemQuotaExceeded is the problem type of a refusal, defined by
// draft-ietf-httpapi-ratelimit-headers-10 for requests beyond a quota.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies is the draft's extension member: the policies, as
	// named in RateLimit-Policy, whose quota was exceeded.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

func quotaExceeded(policy string, retry time.Duration) problem {
	p := problem{Type: ProblemQuotaExceeded, Title: "Quota exceeded", Status: http.StatusTooManyRequests}
	wait := seconds(retrySeconds(retry))
	if policy == "" {
		p.Detail = "A rate limit was exceeded; retry in " + wait + "."
		return p
	}
	p.Detail = fmt.Sprintf("The rate limit %q was exceeded; retry in %s.", policy, wait)
	p.ViolatedPolicies = []string{policy}
	return p
}

// tooCostly answers a request that costs more than a rule can ever hold.
// It has no Retry-After: waiting would not help. RateLimit-Policy, set
// beside it, shows the limits.
func tooCostly(cost int64) problem {
	return problem{Type: ProblemQuotaExceeded, Title: "Quota exceeded", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("The request costs %d, more than the rate limit allows at once; it cannot pass.", cost)}
}

// unknownRule answers a request whose rate limit is not defined: the
// service's fault, not the caller's, and not a limit to skip.
func unknownRule(rules []string) problem {
	quoted := make([]string, len(rules))
	for i, r := range rules {
		quoted[i] = strconv.Quote(r)
	}
	return problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError),
		Status: http.StatusInternalServerError,
		Detail: "The rate limit " + strings.Join(quoted, ", ") + " is not defined."}
}

func undecided() problem {
	return problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable, Detail: "The rate limiter could not decide this request."}
}

func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return strconv.FormatInt(n, 10) + " seconds"
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil { // a struct of strings and ints: cannot happen
		http.Error(w, p.Title, p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}
