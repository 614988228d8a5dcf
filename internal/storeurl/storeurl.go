// Package storeurl opens a tasklock store from a URL, for the CLI and the
// daemon. Library users never need it: they build the client themselves
// and pass it to the store's constructor.
//
// # Schemes
//
//	mem://                                          in-process memstore
//	redis://[user:pass@]host[:port][/db]            one Redis node
//	rediss://[user:pass@]host[:port][/db]           one Redis node over TLS
//	redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER[?db=N]
//	                                                a Sentinel-managed master
//	redis+cluster://[user:pass@]h1:p1,h2:p2         a Redis Cluster
//
// A missing port is 6379 (26379 for sentinels). The user and password are
// percent-decoded; a password may also hold reserved characters unencoded,
// because the user information always ends at the last '@' of the URL (so
// an '@' anywhere after the hosts must be written %40).
//
// Query parameters of every Redis scheme: prefix, wait_replicas and
// wait_timeout (redisstore.Options), dial_timeout, read_timeout and
// write_timeout (Go durations) and pool_size. rediss:// also takes
// tls_ca_file (a PEM file of the CAs to trust instead of the system's), and
// redis+sentinel:// db, sentinel_username and sentinel_password. Every
// other parameter is an error naming it.
//
// # Errors and secrets
//
// Malformed URLs and unknown schemes give errors wrapping ErrBadURL, and a
// store that cannot be reached (PING fails within the caller's context)
// errors wrapping ErrUnreachable. Every message shows the URL only in its
// Redact form, and any text a client library returns is scrubbed of the
// password, so a password is never printed.
//
// # Adding a scheme
//
// Add an entry to the schemes table: a function that checks a parsed URL
// (hosts, path, query parameters) without I/O and returns an opener, which
// connects and verifies that the store answers.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// ErrBadURL is wrapped by the errors Open returns for a malformed URL, an
// unknown scheme or an unknown or invalid query parameter. The message says
// what is wrong.
var ErrBadURL = errors.New("storeurl: bad store URL")

// ErrUnreachable is wrapped by the errors Open returns when the store does
// not answer (connection refused, timeout, TLS or authentication failure).
// The client library's error follows in the chain.
var ErrUnreachable = errors.New("storeurl: store unreachable")

// redacted replaces passwords in Redact's output.
const redacted = "xxxxx"

// opener connects to a store described by a URL that has been checked.
type opener interface {
	// open connects and verifies that the store answers within ctx. Its
	// errors are classified by the caller: a plain error means the store is
	// unreachable, one wrapping ErrBadURL is kept as is.
	open(ctx context.Context) (driver.Store, func() error, error)
}

// schemes maps each URL scheme to the function that checks its URLs.
var schemes = map[string]func(u *storeURL) (opener, error){
	"mem":            parseMem,
	"redis":          parseRedis,
	"rediss":         parseRedis,
	"redis+sentinel": parseRedis,
	"redis+cluster":  parseRedis,
}

// Schemes returns the supported URL schemes, sorted.
func Schemes() []string {
	names := make([]string, 0, len(schemes))
	for name := range schemes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Open connects to the store rawURL names and checks that it answers
// within ctx. The caller must call closeFn when done with the store, after
// closing every Locker that uses it.
func Open(ctx context.Context, rawURL string) (store driver.Store, closeFn func() error, err error) {
	o, u, err := parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	store, closeFn, err = o.open(ctx)
	if err != nil {
		if errors.Is(err, ErrBadURL) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, Redact(rawURL), u.scrub(err))
	}
	return store, closeFn, nil
}

// parse splits rawURL and lets its scheme check it.
func parse(rawURL string) (opener, *storeURL, error) {
	u, err := split(rawURL)
	if err != nil {
		return nil, nil, err
	}
	o, err := schemes[u.scheme](u)
	if err != nil {
		return nil, nil, err
	}
	if err := u.query.done(u); err != nil {
		return nil, nil, err
	}
	return o, u, nil
}

// storeURL is a URL split into the parts every scheme looks at.
type storeURL struct {
	raw         string
	scheme      string // lower case
	user        string // percent-decoded
	password    string // percent-decoded
	hasPassword bool
	hostPart    string  // between the user information and the path, as written
	path        string  // after the hosts, without the leading '/', percent-decoded
	query       *params // the query parameters
}

// badf returns an error wrapping ErrBadURL that shows the redacted URL and
// what is wrong with it. The password appears nowhere in the message, even
// where the URL repeats it outside the places Redact hides.
func (u *storeURL) badf(format string, args ...any) error {
	return u.scrub(badf(u.raw, format, args...))
}

func badf(raw, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrBadURL, Redact(raw), fmt.Sprintf(format, args...))
}

// scrub hides the URL's password in err's message; errors.Is and errors.As
// still see err.
func (u *storeURL) scrub(err error) error {
	var secrets []string
	var secret string
	if u.query != nil {
		secret = u.query.secret()
	}
	for _, sec := range []string{u.password, secret} {
		if sec != "" {
			secrets = append(secrets, sec, url.QueryEscape(sec), url.PathEscape(sec))
		}
	}
	if len(secrets) == 0 {
		return err
	}
	return &scrubbedError{err: err, secrets: secrets}
}

// scrubbedError is an error whose message has its secrets replaced.
type scrubbedError struct {
	err     error
	secrets []string
}

func (e *scrubbedError) Error() string {
	s := e.err.Error()
	for _, sec := range e.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	return s
}

func (e *scrubbedError) Unwrap() error { return e.err }

// split parses rawURL into a storeURL. The user information ends at the
// last '@' (as in Redact), the hosts at the next '/' or '?', the path at '?'.
func split(raw string) (*storeURL, error) {
	i := strings.Index(raw, "://")
	if i < 0 || !validScheme(raw[:i]) {
		return nil, badf(raw, "missing scheme, want one of %s followed by ://", strings.Join(Schemes(), ", "))
	}
	u := &storeURL{raw: raw, scheme: strings.ToLower(raw[:i])}
	if _, ok := schemes[u.scheme]; !ok {
		return nil, badf(raw, "unknown scheme %q, want one of %s", raw[:i], strings.Join(Schemes(), ", "))
	}
	rest := raw[i+3:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo := rest[:at]
		rest = rest[at+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		var err error
		if u.user, err = url.PathUnescape(user); err != nil {
			return nil, badf(raw, "invalid percent-encoding in the user name")
		}
		if u.password, err = url.PathUnescape(pass); err != nil {
			// The unescape error quotes part of the password: drop it.
			return nil, badf(raw, "invalid percent-encoding in the password")
		}
		u.hasPassword = hasPass
	}
	if j := strings.IndexByte(rest, '#'); j >= 0 {
		return nil, badf(raw, "a fragment (#...) is not allowed; write '#' in a password as %%23")
	}
	rawQuery := ""
	if j := strings.IndexByte(rest, '?'); j >= 0 {
		rest, rawQuery = rest[:j], rest[j+1:]
	}
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		p, err := url.PathUnescape(rest[j+1:])
		if err != nil {
			return nil, badf(raw, "invalid percent-encoding in the path")
		}
		rest, u.path = rest[:j], p
	}
	u.hostPart = rest
	vals, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, badf(raw, "malformed query string")
	}
	u.query = &params{vals: vals}
	return u, nil
}

// hosts splits the host part on commas into "host:port" addresses, adding
// defaultPort where a port is missing.
func (u *storeURL) hosts(defaultPort string) ([]string, error) {
	if u.hostPart == "" {
		return nil, u.badf("missing host")
	}
	var addrs []string
	for _, h := range strings.Split(u.hostPart, ",") {
		if h == "" {
			return nil, u.badf("empty host in list %q", u.hostPart)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			switch {
			case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
				host, port = h[1:len(h)-1], defaultPort
			case !strings.ContainsAny(h, ":[]"):
				host, port = h, defaultPort
			default:
				return nil, u.badf("invalid host %q, want host:port (an IPv6 address in brackets)", h)
			}
		}
		if host == "" {
			return nil, u.badf("missing host name in %q", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, u.badf("invalid port %q in %q", port, h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// params reads query parameters, records which ones a scheme asked for, and
// keeps the first error.
type params struct {
	vals  url.Values
	asked []string
	err   error
	// secretName is the parameter that holds a password, if the scheme has one.
	secretName string
}

// str returns the parameter's value and whether it was given.
func (p *params) str(name string) (string, bool) {
	p.asked = append(p.asked, name)
	vs, ok := p.vals[name]
	if !ok {
		return "", false
	}
	if len(vs) > 1 && p.err == nil {
		p.err = fmt.Errorf("query parameter %q is given %d times", name, len(vs))
	}
	return vs[0], true
}

// secretStr is str for a parameter that holds a password: its value never
// appears in a message.
func (p *params) secretStr(name string) (string, bool) {
	p.secretName = name
	return p.str(name)
}

// secret returns the value of the password parameter, "" if none.
func (p *params) secret() string {
	if p.secretName == "" || len(p.vals[p.secretName]) == 0 {
		return ""
	}
	return p.vals[p.secretName][0]
}

// duration reads a positive Go duration ("500ms", "3s").
func (p *params) duration(name string) time.Duration {
	v, ok := p.str(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if (err != nil || d <= 0) && p.err == nil {
		p.err = fmt.Errorf("query parameter %s=%q: want a positive duration such as 500ms or 3s", name, v)
	}
	return d
}

// nonNegInt reads an integer >= 0.
func (p *params) nonNegInt(name string) int {
	v, ok := p.str(name)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if (err != nil || n < 0) && p.err == nil {
		p.err = fmt.Errorf("query parameter %s=%q: want an integer >= 0", name, v)
	}
	return n
}

// done reports the first error, or the first parameter nobody asked for.
func (p *params) done(u *storeURL) error {
	if p.err != nil {
		return u.badf("%v", p.err)
	}
	var unknown []string
	for name := range p.vals {
		if !slices.Contains(p.asked, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	accepted := "none"
	if len(p.asked) > 0 {
		a := slices.Clone(p.asked)
		sort.Strings(a)
		accepted = strings.Join(slices.Compact(a), ", ")
	}
	return u.badf("unknown query parameter %q (%s:// accepts: %s)", unknown[0], u.scheme, accepted)
}

// Redact returns rawURL with every password replaced by "xxxxx": the one in
// the user information (user:password@, which ends at the last '@') and the
// value of every query parameter whose name contains "pass", "secret",
// "token" or "auth". It works on malformed URLs too, erring towards hiding
// more.
func Redact(rawURL string) string {
	s := rawURL
	// The user information starts after "scheme://". Without that, a
	// scheme cannot be told from a user name: hide everything from the
	// first ':'.
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && validScheme(s[:i]) {
		start = i + 3
	}
	after := start // where the part after any user information starts
	if at := strings.LastIndexByte(s[start:], '@'); at >= 0 {
		userinfo := s[start : start+at]
		if c := strings.IndexByte(userinfo, ':'); c >= 0 {
			s = s[:start+c+1] + redacted + s[start+at:]
			at = c + 1 + len(redacted)
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
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if !hasValue {
			continue
		}
		if dn, err := url.QueryUnescape(name); err == nil {
			name = dn
		}
		name = strings.ToLower(name)
		if strings.Contains(name, "pass") || strings.Contains(name, "secret") || strings.Contains(name, "token") || strings.Contains(name, "auth") {
			parts[i] = part[:strings.IndexByte(part, '=')+1] + redacted
		}
	}
	s = s[:q+1] + strings.Join(parts, "&")
	if hasFrag {
		s += "#" + frag
	}
	return s
}

// validScheme reports whether s has the syntax of a URL scheme (RFC 3986):
// a letter, then letters, digits, '+', '-' or '.'.
func validScheme(s string) bool {
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
