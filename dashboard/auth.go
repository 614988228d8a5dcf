package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Session cookie and CSRF names.
const (
	sessionCookie = "tasklock_session"
	csrfHeader    = "X-CSRF-Token"
	csrfField     = "csrf"
	sessionTTL    = 12 * time.Hour
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

// mac signs msg with a key derived from this handler's random secret and the
// token, so a changed token or a restart ends every session.
func (h *handler) mac(msg string) string {
	m := hmac.New(sha256.New, append(h.secret[:len(h.secret):len(h.secret)], h.tokenHash[:]...))
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie value: "EXPIRY.MAC".
func (h *handler) newSession() string {
	exp := strconv.FormatInt(h.clock.Now().Add(sessionTTL).Unix(), 10)
	return exp + "." + h.mac("session."+exp)
}

// session returns the request's valid session cookie value, or "".
func (h *handler) session(r *http.Request) string {
	if h.opts.Token == "" {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	exp, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return ""
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || h.clock.Now().Unix() >= n {
		return ""
	}
	if !hmac.Equal([]byte(sig), []byte(h.mac("session."+exp))) {
		return ""
	}
	return c.Value
}

// csrfToken is the CSRF token of a session: a per-session value the pages
// read from /api/info and send back in the X-CSRF-Token header (or the csrf
// form field). A cross-site page cannot read it.
func (h *handler) csrfToken(session string) string { return h.mac("csrf." + session) }

// mutating lets f run only for a caller holding the token: a bearer
// header, or a session cookie together with its CSRF token.
func (h *handler) mutating(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.opts.Token == "" {
			writeError(w, http.StatusForbidden, "read-only: this dashboard has no token configured")
			return
		}
		if auth := r.Header.Get("Authorization"); auth != "" {
			tok, ok := strings.CutPrefix(auth, "Bearer ")
			if !ok || !h.tokenOK(strings.TrimSpace(tok)) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tasklock"`)
				writeError(w, http.StatusUnauthorized, "invalid bearer token")
				return
			}
			f(w, r)
			return
		}
		s := h.session(r)
		if s == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tasklock"`)
			writeError(w, http.StatusUnauthorized, "log in or send Authorization: Bearer TOKEN")
			return
		}
		given := r.Header.Get(csrfHeader)
		if given == "" {
			given = r.PostFormValue(csrfField)
		}
		if given == "" || !hmac.Equal([]byte(given), []byte(h.csrfToken(s))) {
			writeError(w, http.StatusForbidden, "missing or invalid CSRF token (send the "+csrfHeader+" header)")
			return
		}
		f(w, r)
	}
}

// login checks the token posted in the form field "token" and sets the
// session cookie: HttpOnly, SameSite=Strict, Secure over TLS, scoped to
// the dashboard's path. It answers JSON {"csrf": ...}, or redirects to the
// pages when the caller does not accept JSON (a plain form post).
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		writeError(w, http.StatusForbidden, "read-only: this dashboard has no token configured")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !h.tokenOK(r.PostFormValue("token")) {
		writeError(w, http.StatusUnauthorized, "wrong token")
		return
	}
	s := h.newSession()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s, Path: mountPrefix(r) + "/",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	if !strings.Contains(r.Header.Get("Accept"), "application/json") {
		http.Redirect(w, r, mountPrefix(r)+"/", http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"csrf": h.csrfToken(s)})
}

// logout clears the session cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: mountPrefix(r) + "/",
		MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	writeJSON(w, http.StatusOK, map[string]bool{"logged_out": true})
}
