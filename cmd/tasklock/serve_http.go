//go:build unix

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/buildinfo"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/schedule"
)

// defaultHTTP is serve's --http default.
const defaultHTTP = "127.0.0.1:8080"

// httpFlags are serve's flags for the dashboard.
type httpFlags struct {
	addr     string
	addrSet  bool // --http was given
	token    string
	insecure bool
	public   bool // --public-read
}

// addHTTPFlags registers --http, --token, --public-read and --insecure on
// fs.
func addHTTPFlags(fs *flag.FlagSet, h *httpFlags) {
	fs.Func("http", "", func(v string) error { h.addr, h.addrSet = v, true; return nil })
	// An empty --token (--token "$UNSET") was taken as none: a
	// read-only dashboard, or $TASKLOCK_TOKEN's, without a word.
	fs.Func("token", "", func(v string) error {
		if v == "" {
			return errors.New("empty (leave --token out for $TASKLOCK_TOKEN, or for a read-only dashboard)")
		}
		h.token = v
		return nil
	})
	fs.BoolVar(&h.public, "public-read", false, "")
	fs.BoolVar(&h.insecure, "insecure", false, "")
	h.addr = defaultHTTP
}

// check completes the flags from the environment and refuses a dashboard
// that anyone on the network could change.
func (h *httpFlags) check() error {
	if h.token == "" {
		h.token = os.Getenv("TASKLOCK_TOKEN")
	}
	if h.public && h.token == "" {
		return usagef("--public-read needs --token (or $TASKLOCK_TOKEN): without a token the dashboard is read-only and open to every reader already")
	}
	if h.addr == "" {
		return nil
	}
	host, _, err := splitHTTPAddr(h.addr, " (empty disables the dashboard)")
	if err != nil {
		return err
	}
	if !isLoopback(host) && h.token == "" && !h.insecure {
		return usagef("--http %s is not a loopback address: set --token (or $TASKLOCK_TOKEN) so that only token holders can trigger, pause and release, or add --insecure to serve it read-only to anyone who can reach it", h.addr)
	}
	return nil
}

// isLoopback reports whether host names only this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// version is this binary's module version (see buildinfo.Info.Version).
func version() string { return buildinfo.Get().Version }

// nodeLockOptions are the options of the node-name lock: its owner name
// carries the version, for the dashboard's nodes page.
func (s *server) nodeLockOptions() *tasklock.ObtainOptions {
	owner := dashboard.NodeOwner(s.node, version())
	if len(owner) > tasklock.MaxOwnerLen {
		owner = s.node
	}
	return &tasklock.ObtainOptions{Owner: owner}
}

// httpStopWait bounds how long stopping the dashboard waits for requests
// in progress: a bound, not a wait. Their context is cancelled first, so
// they end at once unless a handler ignores it, and connections without a
// request in progress are closed at once (closeFresh).
const httpStopWait = 2 * time.Second

// httpServer is serve's dashboard server.
type httpServer struct {
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
	wait   time.Duration // stop's bound: httpStopWait

	// fresh are the connections that have not yet sent a whole first
	// request; once stopping, stop closes them, and any accepted after.
	mu       sync.Mutex
	fresh    map[net.Conn]bool
	stopping bool
}

// startHTTP starts the dashboard on --http. It returns nil and exitOK when
// the dashboard is disabled, or when the default address is taken (logged:
// the jobs matter more); nil and an exit status when --http was given and
// cannot be served. s.httpMux is where other handlers (e.g. /metrics) go.
func (s *server) startHTTP(store driver.Store) (*httpServer, int) {
	h := &s.c.http
	if h.addr == "" {
		return nil, exitOK
	}
	dash, err := dashboard.New(dashboard.Options{
		Store: store, StoreURL: s.file.Store, Jobs: s.dashboardJobs,
		Node: s.node, Version: version(), Token: h.token, PublicRead: h.public, Logger: s.log,
		LeaderKey: leaderKey,
		DefineJob: s.defineJob, FileJob: s.fileJob, Handler: s.describeJob,
	})
	if err != nil {
		s.failf("dashboard: %v", err)
		return nil, exitSoftware
	}
	s.httpMux.Handle("/", dash)
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		if !h.addrSet {
			s.log.Warn("dashboard disabled: cannot listen on the default address; set --http ADDR (or --http '' to silence this)", "addr", h.addr, "err", err)
			return nil, exitOK
		}
		s.failf("--http %s: %v", h.addr, err)
		return nil, exitUnavailable
	}
	hs := serveHTTP(ln, s.httpMux, s.log)
	mode := "read-only"
	switch {
	case h.token != "" && h.public:
		mode = "token to act, public read"
	case h.token != "":
		mode = "token"
	}
	s.log.Info("dashboard", "url", "http://"+ln.Addr().String()+"/", "access", mode)
	return hs, exitOK
}

// defineJob checks a job posted to the dashboard's job API, as jobs
// create does: a valid job whose runs take no lock that a job in force on
// this node takes, of the file or defined at run time.
func (s *server) defineJob(body []byte, name string) (string, string, error) {
	j, def, err := config.Define("request body", body, name)
	if err != nil {
		return "", "", errors.New(strings.Join(config.AsErrors(err), "\n"))
	}
	s.mu.Lock()
	file, runtime := s.file.Jobs, s.rtJobs
	s.mu.Unlock()
	if msg := config.SharedLock(j, file); msg != "" {
		return "", "", fmt.Errorf("job %q cannot run beside a job of the configuration file: %s", j.Name, msg)
	}
	if msg := config.SharedLock(j, runtime); msg != "" {
		return "", "", fmt.Errorf("job %q cannot run beside a job defined at run time: %s", j.Name, msg)
	}
	return j.Name, def, nil
}

// serveHTTP serves h on ln until stop.
func serveHTTP(ln net.Listener, h http.Handler, log *slog.Logger) *httpServer {
	ctx, cancel := context.WithCancel(context.Background())
	hs := &httpServer{ln: ln, cancel: cancel, done: make(chan struct{}), wait: httpStopWait, fresh: map[net.Conn]bool{}}
	hs.srv = &http.Server{
		Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnState:   hs.connState,
		ErrorLog:    nil,
	}
	hs.srv.RegisterOnShutdown(hs.closeFresh)
	go func() {
		defer close(hs.done)
		if err := hs.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("dashboard server stopped", "err", err)
		}
	}()
	return hs
}

// stop ends the event streams and shuts the server down: the responses in
// progress are finished (their requests' context is cancelled), every
// other connection is closed at once.
func (hs *httpServer) stop() {
	if hs == nil {
		return
	}
	hs.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), hs.wait)
	defer cancel()
	if hs.srv.Shutdown(ctx) != nil {
		_ = hs.srv.Close()
	}
	<-hs.done
}

// connState is the server's ConnState hook: it keeps the set of fresh
// connections, and closes one accepted once stopping.
func (hs *httpServer) connState(c net.Conn, st http.ConnState) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	switch {
	case st == http.StateNew && hs.stopping:
		_ = c.Close()
	case st == http.StateNew:
		hs.fresh[c] = true
	default:
		delete(hs.fresh, c)
	}
}

// closeFresh closes the connections that have not sent a whole request,
// when Shutdown has closed the listener. Shutdown closes idle connections
// itself but waits for fresh ones until they are 5s old (a request may be
// on its way: golang/go#22682), so a client that had just connected, or
// that sent part of a request, held serve's exit for the whole of
// httpStopWait. Such a request would find its context cancelled, and serve
// gone a moment later: it is not worth waiting for.
func (hs *httpServer) closeFresh() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.stopping = true
	for c := range hs.fresh {
		_ = c.Close()
	}
	clear(hs.fresh)
}

// dashboardJobs returns the jobs in force, for the dashboard; it is called
// from the server's goroutines.
func (s *server) dashboardJobs() []schedule.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobsOf != s.file || s.jobsGen != s.rtGen {
		s.jobsOf, s.jobsGen = s.file, s.rtGen
		s.jobs = jobsOf(s.file.Jobs, s.rtJobs)
	}
	return s.jobs
}

// jobsOf lists the configuration file's jobs, then the jobs defined at
// run time that the file does not name.
func jobsOf(file, runtime []config.Job) []schedule.Job {
	out := make([]schedule.Job, 0, len(file)+len(runtime))
	seen := make(map[string]bool, len(file))
	for _, j := range file {
		seen[j.Name] = true
		out = append(out, j.Job)
	}
	for _, j := range runtime {
		if !seen[j.Name] {
			out = append(out, j.Job)
		}
	}
	return out
}

// describeJob says what the named job in force runs, for its dashboard
// page, secrets hidden: its command (or HTTP request) and kill grace.
func (s *server) describeJob(name string) []dashboard.DefField {
	s.mu.Lock()
	file, rt := s.file, s.rtJobs
	s.mu.Unlock()
	for _, js := range [][]config.Job{file.Jobs, rt} {
		for _, j := range js {
			if j.Name == name {
				return append(jobHandlerFields(j, s.redact), notifyFields(s.notifyFor(name))...)
			}
		}
	}
	return nil
}

// jobHandlerFields describes j's handler, each value through hide (serve's
// redactor: the token and the store's secrets, then redact.Text): a
// header whose name looks secret (Authorization, X-Api-Key) shows as
// redact.Mask, a body as its size.
func jobHandlerFields(j config.Job, hide func(string) string) []dashboard.DefField {
	if hide == nil {
		hide = func(s string) string { return redact.Text(s) }
	}
	if j.HTTP != nil {
		h := j.HTTP
		out := []dashboard.DefField{{Key: "http", Value: hide(cmp.Or(h.Method, http.MethodGet) + " " + redact.URL(h.URL))}}
		for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
			v := h.Headers[k]
			if redact.SecretName(k) || strings.EqualFold(k, "Authorization") {
				v = redact.Mask
			}
			out = append(out, dashboard.DefField{Key: "header " + k, Value: hide(v)})
		}
		if h.Body != "" {
			out = append(out, dashboard.DefField{Key: "body", Value: strconv.Itoa(len(h.Body)) + " bytes"})
		}
		return append(out, dashboard.DefField{Key: "http timeout", Value: cmp.Or(h.Timeout, config.DefaultHTTPTimeout).String()})
	}
	args := make([]string, len(j.Command))
	for i, a := range j.Command {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$") {
			a = strconv.Quote(a)
		}
		args[i] = a
	}
	return []dashboard.DefField{
		{Key: "command", Value: hide(strings.Join(args, " "))},
		{Key: "kill_grace", Value: cmp.Or(j.KillGrace, config.DefaultKillGrace).String()},
	}
}
