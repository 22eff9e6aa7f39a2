// Package redact masks what may be a secret in a function's URL, one way wherever the
// URL is shown to someone who may not hold it: the API's readers without
// functions:write, exports, checks, and the spans a gateway exports.
package redact

import "net/url"

// Mask stands for a masked part of a URL.
const Mask = "xxxxx"

// URL returns raw with what may be a secret masked (Mask), keeping its scheme, host,
// port and query keys: its user information, its path, the values of its query and its
// fragment ("https://xxxxx:xxxxx@host/xxxxx?token=xxxxx#xxxxx"), as webhook-style URLs
// keep secrets in any of them. A path of "" or "/" is kept. A URL that does not parse is
// "(unreadable URL)".
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unreadable URL)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(Mask, Mask)
		} else {
			u.User = url.User(Mask)
		}
	}
	if u.Path != "" && u.Path != "/" {
		u.Path, u.RawPath = "/"+Mask, ""
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{Mask}
		}
		u.RawQuery = q.Encode()
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Mask, ""
	}
	return u.String()
}
