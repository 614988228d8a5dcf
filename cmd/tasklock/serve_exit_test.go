//go:build unix

package main

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// freshConnAge is how old net/http's Shutdown lets a connection that has
// not sent a whole first request grow before it counts as idle and is
// closed (golang/go#22682): 5 whole seconds of time.Now().Unix().
const freshConnAge = 5 * time.Second

// TestServeHTTPStopClosesFreshConnections: stopping the dashboard closes at
// once a connection that has sent no request, or part of one, and still
// finishes a response in progress. Shutdown alone waited for such a
// connection until it was 5s old, so a client that had just connected held
// serve's exit for the whole of httpStopWait, 2s, after "shut down" was
// logged. Here that bound is an hour: only Go's 5s rule could have closed
// them otherwise, never less than 5s after they connected.
func TestServeHTTPStopClosesFreshConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	streaming := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		// Like the dashboard's event stream: it ends with its context.
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(streaming)
		<-r.Context().Done()
		_, _ = io.WriteString(w, "bye")
	})
	hs := serveHTTP(ln, mux, slog.New(slog.DiscardHandler))
	hs.wait = time.Hour
	stopped := make(chan struct{})
	defer func() {
		select {
		case <-stopped:
		default:
			_ = hs.srv.Close()
		}
	}()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-streaming

	connected := time.Now()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	silent := dial()
	partial := dial()
	if _, err := io.WriteString(partial, "GET /ok HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server accepts in order, and marks each connection new before
	// it accepts the next: once a later request is answered, both are
	// the server's fresh connections.
	if code, body := httpGet(t, client, "http://"+addr+"/ok", ""); code != http.StatusOK || body != "ok" {
		t.Fatalf("GET /ok: %d %q", code, body)
	}

	go func() { defer close(stopped); hs.stop() }()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("stop did not return within a minute (its bound is an hour)")
	}
	for name, c := range map[string]net.Conn{"a connection that sent nothing": silent, "a connection that sent part of a request": partial} {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: read %d bytes, err %v; want it closed by the server", name, n, err)
		}
	}
	if age := time.Since(connected); age >= freshConnAge {
		t.Errorf("stop ended %v after the fresh connections were made: net/http's %v rule closed them, not stop", age, freshConnAge)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "bye" {
		t.Errorf("the response in progress: %q, %v; want it finished: \"bye\"", body, err)
	}
}

// TestServeLogsShutDownLast: "shut down" is logged when serve is about to
// exit, its cleanup done: the dashboard stopped and the node-name lock and
// leadership released at the store. It used to come first, and then serve
// could go on for seconds (2s for a dashboard client that had just
// connected) holding its locks. A client that connected and sent nothing
// is there to hold the dashboard as one did.
func TestServeLogsShutDownLast(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "s.db")
	cfg := writeConfig(t, dir, "store: "+store+"\nnode: web-1\njobs:\n  - name: a\n    schedule: '@every 1h'\n    command: [true]\n")
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0")
	p.WaitStderr(`msg=serving`, 30*time.Second)
	url := regexp.MustCompile(`msg=dashboard url=(http://\S+)/`).FindStringSubmatch(p.Stderr())
	if url == nil {
		t.Fatalf("no dashboard URL logged:\n%s", p.Stderr())
	}
	if code, out, errOut := tl.Run(t, nil, "locks", "list", "--store", store); code != 0 || !strings.Contains(out, "serve/node/web-1") {
		t.Fatalf("locks list while serving: exit %d\n%s%s", code, out, errOut)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(url[1], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Answered, so the silent connection before it was accepted.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if code, _ := httpGet(t, client, url[1]+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}

	p.Signal(syscall.SIGTERM)
	// Not WaitStderr: serve may exit as soon as it has logged it.
	clitest.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(p.Stderr(), `msg="shut down"`) }, `serve to log "shut down"`)
	if code, out, errOut := tl.Run(t, nil, "locks", "list", "--store", store); code != 0 || strings.TrimSpace(out) != "no locks held" {
		t.Errorf("locks list once serve logged \"shut down\": exit %d, want no locks held\n%s%s", code, out, errOut)
	}
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
	lines := strings.Split(strings.TrimSpace(p.Stderr()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="shut down"`) {
		t.Errorf("the last line is not \"shut down\": %s\nstderr:\n%s", last, p.Stderr())
	}
}
