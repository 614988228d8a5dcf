package main

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redactedText replaces a secret in text that a redactor rewrote, as
// storeurl.Redact does in URLs.
const redactedText = "xxxxx"

// minSecretLen is the length below which a secret is hidden only where it
// stands as a URL's password: replacing every "ab" in a job's output would
// garble it and hide little.
const minSecretLen = 4

// urlPassword matches the password in the user information of any URL in
// a text: scheme://user:PASSWORD@.
var urlPassword = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#@]+@`)

// newRedactor returns a function that hides, in any text, every secret
// (literally, and in its percent-encoded and -decoded forms) and the
// password of every URL in it. serve passes the dashboard token and the
// store URL's secrets (storeSecrets), and rewrites with it the output and
// errors it keeps in the run history and the job lines it prints.
func newRedactor(secrets ...string) func(string) string {
	var all []string
	for _, s := range secrets {
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if len(form) >= minSecretLen {
				all = append(all, form)
			}
		}
		if d, err := url.PathUnescape(s); err == nil && len(d) >= minSecretLen {
			all = append(all, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && len(d) >= minSecretLen {
			all = append(all, d)
		}
	}
	// Longest first, so that a secret containing another is hidden whole.
	slices.SortFunc(all, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, s := range all {
		pairs = append(pairs, s, redactedText)
	}
	r := strings.NewReplacer(pairs...)
	return func(text string) string {
		if len(pairs) > 0 {
			text = r.Replace(text)
		}
		return urlPassword.ReplaceAllString(text, "${1}"+redactedText+"@")
	}
}

// storeSecrets are the secrets in a store URL: the password of its user
// information and the values of query parameters whose names suggest a
// secret (those storeurl.Redact hides).
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
			n := strings.ToLower(name)
			if ok && v != "" && (strings.Contains(n, "pass") || strings.Contains(n, "secret") || strings.Contains(n, "token") || strings.Contains(n, "auth")) {
				out = append(out, v)
			}
		}
	}
	return out
}
