// Package redact masks the secrets in what messages and logs show: the
// password of a URL's user, in the URL or in a URL among its parameters
// (a bucket URL's endpoint).
package redact

import "net/url"

// URL is raw, a URL (a bucket's), as messages may show it: without the password
// of a user in it, or in a URL among its parameters (an endpoint's).
// What does not parse as a URL is shown as it is.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	changed := false
	if _, ok := u.User.Password(); ok {
		changed = true
	}
	q := u.Query()
	for k, vs := range q {
		for i, v := range vs {
			if p, err := url.Parse(v); err == nil && p.User != nil {
				if _, ok := p.User.Password(); ok {
					vs[i], changed = p.Redacted(), true
				}
			}
		}
		q[k] = vs
	}
	if !changed {
		return raw
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
