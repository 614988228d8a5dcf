package main

import (
	"net/url"
	"slices"
	"strings"

	"github.com/tasklock/tasklock/internal/redact"
)

// newRedactor returns a function that hides, in any text, every secret
// (as it is, and in its percent-encoded and -decoded forms) as
// redact.Text does, which also hides the password of every URL and DSN in
// the text. serve passes the dashboard token and the store URL's secrets
// (storeSecrets), and rewrites with it the output and errors it keeps in
// the run history and the job lines it prints.
func newRedactor(secrets ...string) func(string) string {
	var all []string
	for _, s := range secrets {
		if s == "" {
			continue
		}
		all = append(all, s, url.QueryEscape(s), url.PathEscape(s))
		if d, err := url.PathUnescape(s); err == nil {
			all = append(all, d)
		}
		if d, err := url.QueryUnescape(s); err == nil {
			all = append(all, d)
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	return redact.Replacer(all...)
}

// storeSecrets are the secrets in a store URL: the password of its user
// information and the values of query parameters whose names suggest a
// secret (those redact.URL hides).
func storeSecrets(raw string) []string {
	var out []string
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	rest := raw[start:]
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
			out = append(out, pw)
		}
	}
	if _, q, ok := strings.Cut(raw, "?"); ok {
		q, _, _ = strings.Cut(q, "#")
		for _, part := range strings.Split(q, "&") {
			name, v, ok := strings.Cut(part, "=")
			if ok && v != "" && redact.SecretName(name) {
				out = append(out, v)
			}
		}
	}
	return out
}
