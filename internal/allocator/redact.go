package allocator

import (
	"net/url"
	"strconv"
)

// redactURL hides a password before a URL reaches the logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

// quotedURL is raw, its password hidden, quoted after a space, for an
// error that names the flag it came from: ` "redis://:xxxxx@host/0"`.
// An unparsable URL is left out: its password cannot be found to hide.
func quotedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return " " + strconv.Quote(u.Redacted())
}
