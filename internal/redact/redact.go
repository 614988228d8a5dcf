// Package redact makes text safe to print: it hides the passwords and
// query secrets of store URLs, DSNs and HTTP URLs by parsing them, hides
// known secrets where they occur as whole tokens, and quotes untrusted
// names for terminals and error messages.
//
// It never guesses by substring: a one-letter password "o" does not turn
// "connection refused" into "cxxxxxnnectixxxxxn refused". A secret is
// replaced where the syntax says it is one — the password of a URL's user
// information (scheme://user:PASSWORD@host), of go-sql-driver/mysql's DSN
// (user:PASSWORD@tcp(host)/db) and of a libpq keyword/value string
// (password=PASSWORD), the value of a query parameter whose name looks
// secret, and every query value of an http:// or https:// URL — and, for
// the secrets a caller names (Text, Error), wherever one occurs as a whole
// token: not preceded or followed by a letter, digit or '_' it does not
// itself start or end with. Secrets shorter than MinTokenLen bytes are
// only replaced where they stand as a password field.
//
// The package is a leaf: it imports only the standard library, so that
// the dashboard can use it without linking the store drivers.
package redact

import (
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask replaces every hidden value.
const Mask = "xxxxx"

// MinTokenLen is the length in bytes from which a secret named to Text is
// replaced wherever it occurs as a whole token; a shorter one is replaced
// only where it stands as a password field (":S@", "=S").
const MinTokenLen = 4

// MaxQuoted is the most bytes of a name that Quote shows.
const MaxQuoted = 200

// URL returns rawURL with every secret replaced by Mask: the password in
// the user information (user:password@, which ends at the last '@'; this
// covers go-sql-driver/mysql's user:password@tcp(host:port)/db too), the
// value of every query parameter whose name looks secret (SecretName),
// and, for http:// and https:// URLs, every query value. A string without
// "scheme://" may be a keyword/value connection string (libpq's
// "host=db password=secret"): there the value of every keyword whose name
// looks secret is hidden as well. It works on malformed URLs too, erring
// towards hiding more.
func URL(rawURL string) string {
	s := redactURL(rawURL)
	if i := strings.Index(rawURL, "://"); i < 0 || !IsScheme(rawURL[:i]) {
		s = keywordSecret.ReplaceAllString(s, "${1}"+Mask)
	}
	return s
}

// redactURL hides the password in the user information and the secret
// query values.
func redactURL(rawURL string) string {
	s := rawURL
	// The user information starts after "scheme://". Without that, a
	// scheme cannot be told from a user name: hide everything from the
	// first ':'.
	start := 0
	allValues := false
	if i := strings.Index(s, "://"); i >= 0 && IsScheme(s[:i]) {
		start = i + 3
		scheme := strings.ToLower(s[:i])
		allValues = scheme == "http" || scheme == "https"
	}
	after := start // where the part after any user information starts
	if at := strings.LastIndexByte(s[start:], '@'); at >= 0 {
		userinfo := s[start : start+at]
		if c := strings.IndexByte(userinfo, ':'); c >= 0 {
			s = s[:start+c+1] + Mask + s[start+at:]
			at = c + 1 + len(Mask)
		}
		after = start + at + 1
	}
	q := strings.IndexByte(s[after:], '?')
	if q < 0 {
		return s
	}
	q += after
	query, frag, hasFrag := strings.Cut(s[q+1:], "#")
	parts := strings.Split(query, "&")
	lastSecret := false // the last query value is a secret's
	for i, part := range parts {
		lastSecret = false
		name, _, hasValue := strings.Cut(part, "=")
		if !hasValue {
			continue
		}
		if dn, err := url.QueryUnescape(name); err == nil {
			name = dn
		}
		if lastSecret = SecretName(name); allValues || lastSecret {
			parts[i] = part[:strings.IndexByte(part, '=')+1] + Mask
		}
	}
	s = s[:q+1] + strings.Join(parts, "&")
	// A fragment right after a hidden value is more likely the rest of
	// it, an unescaped '#' in a password, than a fragment: hide it too.
	if hasFrag && !lastSecret {
		s += "#" + frag
	}
	return s
}

// secretWords are the parts of a parameter name that make its value a
// secret: a name holding one of secretParts anywhere ("sentinel_password",
// "client_secret"), or one of secretTokens as a whole word ("api_key",
// "X-Amz-Signature", "sig").
var (
	secretParts  = []string{"pass", "pwd", "secret", "token", "auth", "credential", "signature", "apikey", "private"}
	secretTokens = []string{"key", "sig", "sid", "jwt", "bearer", "cookie"}
)

// SecretName reports whether a query parameter or keyword named name
// holds a secret: its lower-cased name contains pass, pwd, secret, token,
// auth, credential, signature, apikey or private, or one of its words
// (split at '_', '-', '.' and case changes) is key, sig, sid, jwt, bearer
// or cookie. A name whose last word is file or path
// names a file, not a secret (tls_key_file).
func SecretName(name string) bool {
	words := splitWords(name)
	if len(words) == 0 {
		return false
	}
	if last := words[len(words)-1]; last == "file" || last == "path" {
		return false
	}
	lower := strings.ToLower(name)
	for _, p := range secretParts {
		if strings.Contains(lower, p) {
			return true
		}
	}
	for _, w := range words {
		for _, t := range secretTokens {
			if w == t {
				return true
			}
		}
	}
	return false
}

// splitWords splits a parameter name into lower-case words at
// non-alphanumeric characters and at lower-to-upper case changes.
func splitWords(name string) []string {
	var words []string
	var cur []rune
	prevLower := false
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range name {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
			prevLower = false
			continue
		case unicode.IsUpper(r) && prevLower:
			flush()
		}
		cur = append(cur, r)
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	flush()
	return words
}

// keywordSecret matches name=value in a keyword/value connection string
// (values may be single-quoted, with backslash escapes) where the name
// suggests a secret. An unterminated quote hides the rest of the string.
var keywordSecret = regexp.MustCompile(`(?i)([a-z0-9_.-]*(?:pass|pwd|secret|token|auth|credential|api_?key)[a-z0-9_.-]*[ \t]*=[ \t]*)('(?:[^'\\]|\\.)*'?|[^\s'&"]+)`)

// urlInText finds scheme://... in free text: it ends at white space, a
// double quote, '<', '>' or a backquote.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"<>`]*")

// mysqlDSN finds go-sql-driver/mysql's user:password@net(addr)/db or
// user:password@/db in free text: the password is group 2 and ends at the
// last such '@' of its word.
var mysqlDSN = regexp.MustCompile(`(^|[\s"'(=,])([^\s:@"'/(]*:)(\S*)(@(?:tcp|tcp4|tcp6|unix)?\(|@/)`)

// Text returns s with the secrets in it replaced by Mask: every URL in it
// (scheme://..., redacted as URL does, which also covers the user
// information of an http:// URL and its query values), every
// go-sql-driver/mysql DSN's password, the value of every name=value whose
// name looks secret, and each of secrets — as given, percent-encoded as in
// a query, a path or the user information of a URL — where it occurs as a
// whole token (see the package documentation; one shorter than
// MinTokenLen only where it stands as a password field).
func Text(s string, secrets ...string) string {
	return replaceForms(redactSyntax(s), forms(secrets))
}

// Replacer returns a function that does what Text does with secrets,
// working out once the forms of secrets to look for: for text redacted
// again and again with the same secrets, such as a command's output lines.
func Replacer(secrets ...string) func(string) string {
	vs := forms(secrets)
	return func(s string) string { return replaceForms(redactSyntax(s), vs) }
}

// forms are the forms of secrets Text hides, longest first: each as
// given, percent-encoded as in a query, a path and the user information
// of a URL.
func forms(secrets []string) []string {
	var vs []string
	for _, sec := range secrets {
		if sec == "" || sec == Mask {
			continue
		}
		userinfo := strings.TrimPrefix(url.UserPassword("", sec).String(), ":")
		vs = append(vs, sec, url.QueryEscape(sec), url.PathEscape(sec), userinfo)
	}
	// Longer first, so that a secret containing another is hidden whole.
	sort.Slice(vs, func(i, j int) bool { return len(vs[i]) > len(vs[j]) })
	return compact(vs)
}

// replaceForms replaces each of vs in s: as a whole token, or one shorter
// than MinTokenLen where it stands as a password field.
func replaceForms(s string, vs []string) string {
	for _, v := range vs {
		if len(v) >= MinTokenLen {
			s = replaceTokens(s, v)
		} else {
			s = replaceFields(s, v)
		}
	}
	return s
}

// redactSyntax hides the secrets that syntax shows in s: the URLs' as URL
// does, and outside them the passwords of MySQL DSNs and the values of
// secret keywords.
func redactSyntax(s string) string {
	var b strings.Builder
	i := 0
	for _, m := range urlInText.FindAllStringIndex(s, -1) {
		b.WriteString(redactKeywords(s[i:m[0]]))
		u := s[m[0]:m[1]]
		// Punctuation that ends a URL ends the sentence around it:
		// "bad URL redis://h?password=x: unknown parameter". (Not '.',
		// which a percent-encoded query value may end with.)
		core := strings.TrimRight(u, ",:;)'")
		b.WriteString(redactURL(core))
		b.WriteString(u[len(core):])
		i = m[1]
	}
	b.WriteString(redactKeywords(s[i:]))
	return b.String()
}

// redactKeywords hides MySQL DSNs' passwords and secret keywords' values
// in text without URLs.
func redactKeywords(s string) string {
	if s == "" {
		return s
	}
	return keywordSecret.ReplaceAllString(redactMySQLDSNs(s), "${1}"+Mask)
}

// redactMySQLDSNs hides the password of every go-sql-driver/mysql DSN in
// s, but not of a URL (scheme://user:password@/db), which URL has hidden.
func redactMySQLDSNs(s string) string {
	ms := mysqlDSN.FindAllStringSubmatchIndex(s, -1)
	if ms == nil {
		return s
	}
	var b strings.Builder
	i := 0
	for _, m := range ms {
		pass := s[m[6]:m[7]]
		if strings.HasPrefix(pass, "//") || pass == Mask {
			continue
		}
		b.WriteString(s[i:m[6]])
		b.WriteString(Mask)
		i = m[7]
	}
	b.WriteString(s[i:])
	return b.String()
}

func compact(vs []string) []string {
	out := vs[:0]
	seen := map[string]bool{}
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// isWord reports whether r is part of a word: a letter, a digit or '_'.
func isWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// replaceTokens replaces every occurrence of v in s that does not extend a
// word: where v starts with a word character, the character before must
// not be one, and likewise at its end.
func replaceTokens(s, v string) string {
	first, _ := utf8.DecodeRuneInString(v)
	last, _ := utf8.DecodeLastRuneInString(v)
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], v)
		if j < 0 {
			break
		}
		j += i
		end := j + len(v)
		before, _ := utf8.DecodeLastRuneInString(s[:j])
		after, _ := utf8.DecodeRuneInString(s[end:])
		if (j > 0 && isWord(first) && isWord(before)) || (end < len(s) && isWord(last) && isWord(after)) {
			// Inside a word: move on by one rune, not past v, so that an
			// occurrence overlapping this one is still found.
			_, n := utf8.DecodeRuneInString(s[j:])
			b.WriteString(s[i : j+n])
			i = j + n
			continue
		}
		b.WriteString(s[i:j])
		b.WriteString(Mask)
		i = end
	}
	if i == 0 {
		return s
	}
	b.WriteString(s[i:])
	return b.String()
}

// replaceFields replaces v where it stands as a password field: between
// ':' and '@' (user information), or after '=' up to the end of the value
// (white space, '&', ';', ',', a quote or the end).
func replaceFields(s, v string) string {
	s = strings.ReplaceAll(s, ":"+v+"@", ":"+Mask+"@")
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], "="+v)
		if j < 0 {
			break
		}
		j += i + 1 // v starts here
		end := j + len(v)
		if end < len(s) && !strings.ContainsRune(" \t\r\n&;,'\"", rune(s[end])) {
			b.WriteString(s[i:j])
			i = j
			continue
		}
		b.WriteString(s[i:j])
		b.WriteString(Mask)
		i = end
	}
	if i == 0 {
		return s
	}
	b.WriteString(s[i:])
	return b.String()
}

// Error returns an error whose message is Text(err.Error(), secrets...)
// and whose chain is err's (errors.Is and errors.As see through it); nil
// for a nil err.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	if re, ok := err.(*redactedError); ok {
		secrets = append(secrets, re.secrets...)
		err = re.err
	}
	return &redactedError{err: err, secrets: secrets}
}

// redactedError is an error whose message has its secrets hidden.
type redactedError struct {
	err     error
	secrets []string
}

func (e *redactedError) Error() string { return Text(e.err.Error(), e.secrets...) }

func (e *redactedError) Unwrap() error { return e.err }

// Quote returns s quoted as strconv.Quote does (control characters and
// invalid UTF-8 escaped, so nothing in it can reach a terminal raw), but
// of at most MaxQuoted bytes of s: a longer s is cut at a character
// boundary and followed by the number of bytes it had, as in
// "aaa..."... (4096 bytes).
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	i := MaxQuoted
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strconv.Quote(s[:i]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Printable returns s as it is when it is valid UTF-8 without control
// characters, and Quote(s) otherwise: for names read back from a store,
// which may predate the checks that now refuse such names, so that a
// listing can neither be forged by a newline nor send escapes to a
// terminal.
func Printable(s string) string {
	if CheckName(s) == "" {
		return s
	}
	return Quote(s)
}

// CheckName returns "" when s is valid UTF-8 without control characters
// (unicode.IsControl: C0, DEL and C1), and otherwise what is wrong, for a
// message ("contains control character U+001B").
func CheckName(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "contains control character " + strings.Replace(strconv.QuoteRune(r), "'", "", 2) + " (" + runeCode(r) + ")"
		}
	}
	return ""
}

func runeCode(r rune) string {
	s := strings.ToUpper(strconv.FormatInt(int64(r), 16))
	for len(s) < 4 {
		s = "0" + s
	}
	return "U+" + s
}

// IsScheme reports whether s has the syntax of a URL scheme (RFC 3986):
// a letter, then letters, digits, '+', '-' or '.'.
func IsScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
