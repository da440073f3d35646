package allocator

import "net/url"

// redactURL hides a password before a URL reaches the logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}
