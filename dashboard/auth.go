package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"html/template"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Session cookie and CSRF names, and the limits of sessions and failures.
const (
	sessionCookie = "tasklock_session"
	csrfHeader    = "X-CSRF-Token"
	csrfField     = "csrf"
	sessionTTL    = 12 * time.Hour
	// maxSessions bounds the session table; past it the session closest
	// to its expiry is dropped.
	maxSessions = 10000
	// failBurst failed logins or bearer tokens a client may send at once,
	// then one more each failEvery; past that it is answered 429.
	failBurst = 10
	failEvery = 6 * time.Second
	// maxClients is how many clients' failure counts are kept before the
	// ones back at a full allowance are forgotten.
	maxClients = 10000
)

// session is one login: until expires, its cookie plus csrf may act.
type session struct {
	csrf    string
	expires time.Time
}

// sessionKey is the table key of a session id: its SHA-256, so that the
// table lookup does not time the secret itself.
type sessionKey [sha256.Size]byte

// allowance is one client's token bucket of failures.
type allowance struct {
	left float64   // failures it may still make
	at   time.Time // when left was computed
}

// authState holds the sessions and the per-client failure allowances.
type authState struct {
	mu       sync.Mutex
	sessions map[sessionKey]session
	fails    map[string]*allowance
}

// credential says how a request authenticated.
type credential int

const (
	anonymous  credential = iota // no credentials, or a cookie of no live session
	viaBearer                    // a valid Authorization: Bearer TOKEN
	viaSession                   // the cookie of a live session
)

// tokenOK reports whether given is the configured token, in constant time
// (both sides are hashed first, so their lengths do not leak either).
func (h *handler) tokenOK(given string) bool {
	if h.opts.Token == "" || given == "" {
		return false
	}
	g := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(g[:], h.tokenHash[:]) == 1
}

// bearer parses an Authorization header of the Bearer scheme, whose name
// is case-insensitive (RFC 9110 section 11.1); ok is false for any other
// scheme.
func bearer(header string) (token string, ok bool) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(header), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// clientKey is whom failures are counted against: the peer's IP address,
// an IPv6 one by its /64 (what one host is usually given). Behind a
// reverse proxy every client shares the proxy's.
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// refill brings a's allowance up to now.
func (a *allowance) refill(now time.Time) {
	if d := now.Sub(a.at); d > 0 {
		a.left = math.Min(failBurst, a.left+float64(d)/float64(failEvery))
	}
	a.at = now
}

// limited reports how long the client must wait before it may try
// credentials again; 0 when it may now.
func (h *handler) limited(client string) time.Duration {
	now := h.clock.Now()
	h.auth.mu.Lock()
	defer h.auth.mu.Unlock()
	a := h.auth.fails[client]
	if a == nil {
		return 0
	}
	a.refill(now)
	if a.left >= 1 {
		return 0
	}
	return time.Duration((1 - a.left) * float64(failEvery))
}

// failed counts one failed login or bearer token against the client.
func (h *handler) failed(client string) {
	now := h.clock.Now()
	h.auth.mu.Lock()
	defer h.auth.mu.Unlock()
	a := h.auth.fails[client]
	if a == nil {
		if len(h.auth.fails) >= maxClients {
			for k, o := range h.auth.fails {
				if o.refill(now); o.left >= failBurst {
					delete(h.auth.fails, k)
				}
			}
		}
		a = &allowance{left: failBurst, at: now}
		h.auth.fails[client] = a
	}
	a.refill(now)
	a.left--
}

// tooMany answers 429 with Retry-After.
func (h *handler) tooMany(w http.ResponseWriter, wait time.Duration, page bool) {
	secs := strconv.Itoa(max(int(math.Ceil(wait.Seconds())), 1))
	w.Header().Set("Retry-After", secs)
	msg := "too many failed logins or bearer tokens from this address: try again in " + secs + " s"
	if page {
		h.loginPage(w, http.StatusTooManyRequests, msg, "")
		return
	}
	writeError(w, http.StatusTooManyRequests, msg)
}

// newSession starts a session: a random 128-bit id (the cookie) and a
// random CSRF token.
func (h *handler) newSession() (id string, s session) {
	now := h.clock.Now()
	id = rand.Text()
	s = session{csrf: rand.Text(), expires: now.Add(sessionTTL)}
	h.auth.mu.Lock()
	defer h.auth.mu.Unlock()
	for k, o := range h.auth.sessions {
		if !now.Before(o.expires) {
			delete(h.auth.sessions, k)
		}
	}
	if len(h.auth.sessions) >= maxSessions {
		var oldest sessionKey
		first := true
		for k, o := range h.auth.sessions {
			if first || o.expires.Before(h.auth.sessions[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(h.auth.sessions, oldest)
	}
	h.auth.sessions[sha256.Sum256([]byte(id))] = s
	return id, s
}

// session returns the live session of the request's cookie.
func (h *handler) session(r *http.Request) (id string, s session, ok bool) {
	if h.opts.Token == "" {
		return "", session{}, false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return "", session{}, false
	}
	k := sha256.Sum256([]byte(c.Value))
	h.auth.mu.Lock()
	defer h.auth.mu.Unlock()
	s, ok = h.auth.sessions[k]
	if !ok {
		return "", session{}, false
	}
	if !h.clock.Now().Before(s.expires) {
		delete(h.auth.sessions, k)
		return "", session{}, false
	}
	return c.Value, s, true
}

// endSession revokes the session id.
func (h *handler) endSession(id string) {
	h.auth.mu.Lock()
	delete(h.auth.sessions, sha256.Sum256([]byte(id)))
	h.auth.mu.Unlock()
}

// authenticate finds the request's credentials. A request that presents
// an Authorization header must present the token in it: otherwise (or
// while the client is over its failure allowance) it is answered 401 or
// 429 here and ok is false. A cookie of no live session counts as none.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (c credential, s session, ok bool) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		client := clientKey(r)
		if wait := h.limited(client); wait > 0 {
			h.tooMany(w, wait, false)
			return anonymous, session{}, false
		}
		tok, isBearer := bearer(auth)
		if !isBearer || !h.tokenOK(tok) {
			h.failed(client)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tasklock", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "invalid bearer token")
			return anonymous, session{}, false
		}
		return viaBearer, session{}, true
	}
	if _, s, ok := h.session(r); ok {
		return viaSession, s, true
	}
	return anonymous, session{}, true
}

// unauthorized answers an anonymous caller that needs credentials.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tasklock"`)
	writeError(w, http.StatusUnauthorized, "log in or send Authorization: Bearer TOKEN")
}

// reading lets f answer a caller allowed to read: anyone without a token
// or with Options.PublicRead, else a bearer or session holder.
func (h *handler) reading(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opts.Token == "" {
			f(w, r)
			return
		}
		c, _, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if c == anonymous && !h.opts.PublicRead {
			unauthorized(w)
			return
		}
		f(w, r)
	}
}

// mutating lets f run only for a caller holding the token: a bearer
// header, or a session cookie together with its CSRF token.
func (h *handler) mutating(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opts.Token == "" {
			writeError(w, http.StatusForbidden, "read-only: this dashboard was started without a token (--token)")
			return
		}
		c, s, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		switch c {
		case viaBearer:
			f(w, r)
			return
		case anonymous:
			unauthorized(w)
			return
		}
		given := r.Header.Get(csrfHeader)
		if given == "" {
			given = r.PostFormValue(csrfField)
		}
		if given == "" || subtle.ConstantTimeCompare([]byte(given), []byte(s.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "missing or invalid CSRF token (send the "+csrfHeader+" header)")
			return
		}
		f(w, r)
	}
}

// wantsJSON reports whether the caller is a script or the pages (JSON)
// rather than a plain form post (a page).
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// login checks the token posted in the form field "token" and starts a
// session: the cookie is HttpOnly, SameSite=Strict, Secure over TLS,
// scoped to the dashboard's path. It answers JSON {"csrf": ...}, or
// redirects to the pages when the caller does not accept JSON (a plain
// form post): to the page the browser was going to when the form carries
// it in "next" (a hash route, "#/job/x", which the browser never sends).
// Failures count against the client's allowance.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		writeError(w, http.StatusForbidden, "read-only: this dashboard was started without a token (--token)")
		return
	}
	page := !wantsJSON(r)
	client := clientKey(r)
	if wait := h.limited(client); wait > 0 {
		h.tooMany(w, wait, page)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !h.tokenOK(r.PostFormValue("token")) {
		h.failed(client)
		if page {
			h.loginPage(w, http.StatusUnauthorized, "wrong token", nextRoute(r))
			return
		}
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	id, s := h.newSession()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: mountPrefix(r) + "/",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	if page {
		// Not http.Redirect: it would clean the route as a path.
		w.Header().Set("Location", mountPrefix(r)+"/"+nextRoute(r))
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"csrf": s.csrf})
}

// logout ends the session server-side, so its cookie and CSRF token are
// dead even where a copy of them survives, and clears the cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if id, _, ok := h.session(r); ok {
		h.endSession(id)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: mountPrefix(r) + "/",
		MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
}

// nextRoute is the login form's "next": the pages' hash route the browser
// was going to, "" when there is none or it is not one ("#/" and at most
// 1024 printable ASCII bytes).
func nextRoute(r *http.Request) string {
	next := r.PostFormValue("next")
	if !strings.HasPrefix(next, "#/") || len(next) > 1024 {
		return ""
	}
	for i := range len(next) {
		if next[i] <= ' ' || next[i] >= 0x7f {
			return ""
		}
	}
	return next
}

// loginTemplate is the page an anonymous browser gets instead of the
// dashboard when reading needs the token. It posts the form to login,
// which comes back to the pages with a session; login.js puts the hash
// route the browser asked for in the form's "next", so that the login
// lands there.
var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tasklock: log in</title>
<link rel="stylesheet" href="style.css">
<link rel="icon" href="data:,">
</head>
<body>
<header><span class="brand">tasklock</span></header>
{{if .Msg}}<div id="message" class="message error">{{.Msg}}</div>
{{end}}<main id="login-page">
<h1>Log in</h1>
<p>This dashboard was started with a token (--token): enter it to see the jobs, runs, locks and nodes and to act on them. Scripts send it as <code>Authorization: Bearer TOKEN</code>.</p>
<form id="login-form" method="post" action="login">
<input id="login-token" name="token" type="password" placeholder="token" autocomplete="current-password" autofocus required>
<input id="login-next" name="next" type="hidden" value="{{.Next}}">
<button id="login-button" type="submit">Log in</button>
</form>
</main>
<script src="login.js"></script>
</body>
</html>
`))

// loginPage answers the login page with code, an optional message and
// the hash route to land on after the login (nextRoute), if known.
func (h *handler) loginPage(w http.ResponseWriter, code int, msg, next string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginTemplate.Execute(w, struct{ Msg, Next string }{msg, next})
}
