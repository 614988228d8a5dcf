package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// Options configure New. Only Store is required.
type Options struct {
	// Store is the store the dashboard reads and changes: its ledger
	// (ledger.Ledger) for jobs and runs, driver.Lister for locks and nodes,
	// driver.ForceReleaser for releasing a lock. Whatever it does not
	// implement is answered with 501 Not Implemented.
	Store driver.Store
	// StoreURL, when set, is shown on the pages, always through
	// redact.URL: passwords never appear.
	StoreURL string
	// Jobs returns the configured jobs (every field but Handler is read:
	// a job's page shows its definition); it is called once per request
	// and must be safe for concurrent use. Nil: the jobs are those the
	// ledger knows of (stored state or a recent run), without schedules.
	// A trigger or retry of a job it returns is never refused as removed
	// from every node: the node serving the dashboard has it.
	Jobs func() []schedule.Job
	// Handler, when set, says what the named configured job runs, for its
	// page: keys and values such as {"command", "/usr/bin/report --all"}
	// or {"url", "POST https://…"}, with every secret already hidden (the
	// values go through redact.Text as well). It is called for one job
	// per request, and must be safe for concurrent use.
	Handler func(job string) []DefField
	// Node and Version name the process serving the dashboard.
	Node    string
	Version string
	// Token, when set, is the secret that every call but /healthz and
	// /readyz must present, as a bearer token or through a login session
	// (see the package documentation). Empty: the dashboard is read-only, and
	// anyone who reaches it reads it.
	Token string
	// PublicRead, with a Token, lets anonymous callers read (the pages and
	// every GET of the API); acting still needs the token.
	PublicRead bool
	// Logger receives store errors. Nil: slog.Default().
	Logger *slog.Logger
	// Clock reads the time (next ticks, expiry, sessions). Nil:
	// tasklock.SystemClock.
	Clock tasklock.Clock
	// KeyPrefix is the schedulers' Config.KeyPrefix. Default:
	// schedule.DefaultKeyPrefix.
	KeyPrefix string
	// NodeKeyPrefix is put before a node's name to make the key of the lock
	// a live node holds. Default: DefaultNodeKeyPrefix.
	NodeKeyPrefix string
	// NodeLeaseTTL is the lease length of the node locks: a live node's
	// last_seen is when it last renewed its lock, the lease's TTL less its
	// remaining time. Default: tasklock.DefaultTTL, as serve uses.
	NodeLeaseTTL time.Duration
	// LeaderKey is the key of the fleet's leader election
	// (tasklock.Election): /api/nodes names the holder of its lease as the
	// leader, with its term (the lease's fence), and marks the node of
	// that name. Default: DefaultLeaderKey.
	LeaderKey string
	// RecentRuns is how many of the newest run records /api/jobs and
	// /api/nodes read, in one query, to find each job's last run and each
	// node's last activity, at most once a second; the jobs of a page not
	// among them are read one by one. Default: 1000.
	RecentRuns int
	// EventInterval is how often /api/events pushes a summary. Default:
	// 1s.
	EventInterval time.Duration
	// DefineJob, when set, turns on the job API: POST /api/jobs, PUT and
	// DELETE /api/jobs/{name} change the jobs defined at run time, kept in
	// the store's ledger.Catalog, each with an audit entry. It checks a
	// definition — the request's body, one job in YAML or JSON; name is
	// the path's, "" for POST — and returns the job's name and the form to
	// store. Its error is answered 400 with the error's text, which should
	// name each mistake. Nil: those calls are answered 501.
	DefineJob func(body []byte, name string) (job, def string, err error)
	// FileJob, with DefineJob, reports whether name is a job of the
	// configuration file, which is authoritative for its jobs: POST and
	// PUT refuse to define it (409).
	FileJob func(name string) bool
	// ReadyTimeout bounds the store call of GET /readyz: a store that has
	// not answered within it is not ready. Default: DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// DefaultReadyTimeout is Options.ReadyTimeout's default. A probe that
// calls /readyz should allow it a second more (Kubernetes' timeoutSeconds
// defaults to 1).
const DefaultReadyTimeout = 2 * time.Second

// DefaultNodeKeyPrefix is the prefix of the locks `tasklock serve` holds
// while it runs: serve/node/NODE.
const DefaultNodeKeyPrefix = "serve/node/"

// DefaultLeaderKey is the key of the leader election every `tasklock
// serve` stands in; its leader runs the jobs with run_on: leader.
const DefaultLeaderKey = "serve/leader"

// NodeOwner is the owner name a node gives its node lock so that the
// dashboard can show its version: "NODE tasklock/VERSION".
func NodeOwner(node, version string) string {
	if version == "" {
		return node
	}
	return node + " tasklock/" + version
}

// parseNodeOwner splits an owner name made by NodeOwner.
func parseNodeOwner(owner string) (node, version string) {
	if i := strings.LastIndex(owner, " tasklock/"); i >= 0 {
		return owner[:i], owner[i+len(" tasklock/"):]
	}
	return owner, ""
}

//go:embed ui
var uiFiles embed.FS

// openAPI is the OpenAPI 3.1 document of the JSON API, served at GET
// /api/openapi.json; a test checks that it names every route and that
// the answers match it.
//
//go:embed openapi.json
var openAPI []byte

// handler is the dashboard.
type handler struct {
	opts      Options
	store     driver.Store
	ledger    ledger.Ledger // nil when the store keeps none
	lister    driver.Lister
	releaser  driver.ForceReleaser
	clock     tasklock.Clock
	log       *slog.Logger
	storeURL  string // redacted
	tokenHash [sha256.Size]byte
	auth      authState // sessions and failure allowances (auth.go)
	mux       *http.ServeMux
	assets    http.Handler
	routes    []route // what route and methods registered, for the OpenAPI test

	schedMu sync.Mutex
	scheds  map[string]schedule.Schedule // parsed specs, by spec and zone

	seenMu    sync.Mutex
	firstSeen map[leaseID]time.Time // when each (key, fence) was first listed

	recentMu    sync.Mutex // held while reading the recent runs
	recent      []ledger.RunRecord
	recentAt    time.Time
	recentN     int
	recentStale atomic.Bool // the summary saw runs the recent runs may lack

	lastMu  sync.Mutex
	lastRun map[string]ledger.RunRecord // each job's newest run seen, without output
	noRuns  map[string]time.Time        // jobs found without runs, and when

	sum summaryCache

	nodeMu   sync.Mutex
	nodeSeen map[string]time.Time // each node's last lease renewal seen

	ready readyState // /readyz's last answer (ready.go)
}

// route is one method and pattern the handler serves.
type route struct{ method, pattern string }

type leaseID struct {
	key   string
	fence uint64
}

// New returns the dashboard: the web UI at / and the JSON API under /api/.
// Mount it at a prefix with http.StripPrefix: every link is relative.
func New(opts Options) (http.Handler, error) {
	if opts.Store == nil {
		return nil, errors.New("dashboard: Options.Store is nil")
	}
	if opts.RecentRuns < 0 {
		return nil, errors.New("dashboard: Options.RecentRuns is negative")
	}
	if opts.EventInterval < 0 {
		return nil, errors.New("dashboard: Options.EventInterval is negative")
	}
	if opts.ReadyTimeout < 0 {
		return nil, errors.New("dashboard: Options.ReadyTimeout is negative")
	}
	h := &handler{
		opts: opts, store: opts.Store, clock: opts.Clock, log: opts.Logger,
		storeURL: redact.URL(opts.StoreURL),
		scheds:   map[string]schedule.Schedule{}, firstSeen: map[leaseID]time.Time{},
		lastRun:  map[string]ledger.RunRecord{},
		noRuns:   map[string]time.Time{},
		nodeSeen: map[string]time.Time{},
		auth:     authState{sessions: map[sessionKey]session{}, fails: map[string]*allowance{}},
	}
	if h.clock == nil {
		h.clock = tasklock.SystemClock{}
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.opts.KeyPrefix == "" {
		h.opts.KeyPrefix = schedule.DefaultKeyPrefix
	}
	if h.opts.NodeKeyPrefix == "" {
		h.opts.NodeKeyPrefix = DefaultNodeKeyPrefix
	}
	if h.opts.NodeLeaseTTL <= 0 {
		h.opts.NodeLeaseTTL = tasklock.DefaultTTL
	}
	if h.opts.LeaderKey == "" {
		h.opts.LeaderKey = DefaultLeaderKey
	}
	if h.opts.EventInterval == 0 {
		h.opts.EventInterval = time.Second
	}
	if h.opts.ReadyTimeout == 0 {
		h.opts.ReadyTimeout = DefaultReadyTimeout
	}
	h.ledger, _ = opts.Store.(ledger.Ledger)
	h.lister, _ = opts.Store.(driver.Lister)
	h.releaser, _ = opts.Store.(driver.ForceReleaser)
	if opts.Token != "" {
		h.tokenHash = sha256.Sum256([]byte(opts.Token))
	}
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return nil, err
	}
	h.assets = http.FileServerFS(sub)

	m := http.NewServeMux()
	h.mux = m
	h.route(m, http.MethodGet, "/healthz", healthz)
	h.route(m, http.MethodGet, "/readyz", h.readyz)
	h.route(m, http.MethodGet, "/api/info", h.reading(h.info))
	h.route(m, http.MethodGet, "/api/openapi.json", serveOpenAPI)
	h.methods(m, "/api/jobs", map[string]http.HandlerFunc{
		http.MethodGet: h.reading(h.jobs), http.MethodPost: h.mutating(h.defineJob(jobdefs.Create)),
	})
	h.methods(m, "/api/jobs/{name}", map[string]http.HandlerFunc{
		http.MethodPut: h.mutating(h.defineJob(jobdefs.Update)), http.MethodDelete: h.mutating(h.deleteJob),
	})
	h.route(m, http.MethodGet, "/api/audit", h.reading(h.auditList))
	h.route(m, http.MethodGet, "/api/notifications", h.reading(h.notifications))
	h.route(m, http.MethodGet, "/api/runs", h.reading(h.runs))
	h.route(m, http.MethodGet, "/api/run", h.reading(h.run))
	h.route(m, http.MethodGet, "/api/overview", h.reading(h.overview))
	h.route(m, http.MethodGet, "/api/locks", h.reading(h.locks))
	h.route(m, http.MethodGet, "/api/nodes", h.reading(h.nodes))
	h.route(m, http.MethodGet, "/api/events", h.reading(h.events))
	h.route(m, http.MethodPost, "/api/jobs/{name}/trigger", h.mutating(h.setState(ledger.JobTrigger)))
	h.route(m, http.MethodPost, "/api/jobs/{name}/pause", h.mutating(h.setState(ledger.JobPause)))
	h.route(m, http.MethodPost, "/api/jobs/{name}/resume", h.mutating(h.setState(ledger.JobResume)))
	h.route(m, http.MethodPost, "/api/locks/{key}/release", h.mutating(h.release))
	h.route(m, http.MethodPost, "/api/runs/cancel", h.mutating(h.cancelRun)) // actapi.go
	h.route(m, http.MethodPost, "/api/runs/retry", h.mutating(h.retryRun))
	h.route(m, http.MethodPost, "/login", h.login)
	h.route(m, http.MethodPost, "/logout", h.mutating(h.logout))
	m.HandleFunc("/api/", h.reading(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.URL.Path)
	}))
	m.HandleFunc("/", h.ui)
	return h, nil
}

// route registers h for one method on pattern, answering other methods
// with a JSON 405.
func (h *handler) route(m *http.ServeMux, method, pattern string, f http.HandlerFunc) {
	h.routes = append(h.routes, route{method, pattern})
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed; use "+method)
			return
		}
		if !checkParams(w, r, method, pattern) {
			return
		}
		f(w, r)
	})
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	hd.Set("Cache-Control", "no-store")
	if r.URL.Path == "" {
		// Mounted with StripPrefix("/x", ...) and asked for "/x": the
		// relative links need the slash.
		http.Redirect(w, r, mountPrefix(r)+"/", http.StatusMovedPermanently)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// healthz is GET /healthz: 200 "ok" while the process serves, with no
// credentials and no data (a liveness probe; it does not read the store).
func healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// serveOpenAPI is GET /api/openapi.json: the API's OpenAPI document, with
// no credentials, like /healthz: it is the same for every dashboard of
// this version and holds no data.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(openAPI)
}

// ui serves the embedded pages; when reading needs the token, an anonymous
// browser gets the login page (401) instead, and only the style sheet and
// the login page's script.
func (h *handler) ui(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed")
		return
	}
	if h.opts.Token != "" && !h.opts.PublicRead {
		c, _, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if c == anonymous {
			switch r.URL.Path {
			case "/style.css", "/login.js":
			case "/", "/index.html":
				h.loginPage(w, http.StatusUnauthorized, "", "")
				return
			default:
				unauthorized(w)
				return
			}
		}
	}
	if !utf8.ValidString(r.URL.Path) {
		// No embedded file has such a name, and the file server would
		// answer fs.ErrInvalid with a 500.
		http.NotFound(w, r)
		return
	}
	h.assets.ServeHTTP(w, r)
}

// mountPrefix is the part of the request's path that a StripPrefix in
// front of the dashboard removed ("" at the root).
func mountPrefix(r *http.Request) string {
	full := r.RequestURI
	if i := strings.IndexAny(full, "?#"); i >= 0 {
		full = full[:i]
	}
	if p, ok := strings.CutSuffix(full, r.URL.EscapedPath()); ok {
		return p
	}
	return ""
}

// writeJSON writes v with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// storeError reports a failed store call: 503 with the error, any URL in it
// redacted.
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, err error) {
	msg := redact.Text(err.Error())
	h.log.Warn("dashboard: store call failed", "path", r.URL.Path, "err", msg)
	writeError(w, http.StatusServiceUnavailable, "store: "+msg)
}
