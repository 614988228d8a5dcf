package dashboard_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/redisstore"
)

// syncBuffer is a bytes.Buffer that a logger and a test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// readyAnswer is the body of /readyz.
type readyAnswer struct {
	Ready  bool   `json:"ready"`
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// getReady GETs /readyz without credentials, checks that the status
// agrees with the body, and returns the body.
func getReady(t *testing.T, base string) readyAnswer {
	t.Helper()
	code, body, _ := call(t, nil, "GET", base+"/readyz", nil, "")
	var a readyAnswer
	decode(t, body, &a)
	if want := map[bool]int{true: 200, false: 503}[a.Ready]; code != want {
		t.Fatalf("GET /readyz: %d with %s, want %d", code, body, want)
	}
	return a
}

// TestDashboardReadyz: /readyz follows a real Redis as it hangs (SIGSTOP),
// comes back, dies and comes back again, while /healthz answers 200
// throughout; neither needs the token, and a failure's reason names no
// host, port or password, which go to the log once per outage.
func TestDashboardReadyz(t *testing.T) {
	srv := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	const timeout = 300 * time.Millisecond
	dash := server(t, st, testToken, func(o *dashboard.Options) {
		o.ReadyTimeout = timeout
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	healthy := func(when string) {
		t.Helper()
		if code, body, _ := call(t, nil, "GET", dash.URL+"/healthz", nil, ""); code != 200 || body != "ok\n" {
			t.Errorf("GET /healthz %s: %d %q, want 200 ok", when, code, body)
		}
	}
	waitReady := func(want bool, when string) readyAnswer {
		t.Helper()
		var a readyAnswer
		clitest.WaitFor(t, 15*time.Second, func() bool { a = getReady(t, dash.URL); return a.Ready == want }, "/readyz ready="+map[bool]string{true: "true", false: "false"}[want]+" "+when)
		return a
	}
	port := srv.Addr()[strings.LastIndex(srv.Addr(), ":")+1:]
	checkReason := func(a readyAnswer, want string) {
		t.Helper()
		if a.Check != "ledger" || !strings.Contains(a.Reason, want) {
			t.Errorf("/readyz: %+v, want check ledger and a reason with %q", a, want)
		}
		if strings.Contains(a.Reason, "127.0.0.1") || strings.Contains(a.Reason, port) {
			t.Errorf("/readyz's reason names the store's address: %q", a.Reason)
		}
	}

	if a := waitReady(true, "with Redis up"); a.Check != "ledger" || a.Reason != "" {
		t.Errorf("ready: %+v, want check ledger and no reason", a)
	}
	healthy("with Redis up")

	srv.Stop(t)
	checkReason(waitReady(false, "with Redis stopped"), "did not answer within "+timeout.String())
	healthy("with Redis stopped")
	srv.Cont(t)
	waitReady(true, "once Redis runs again")

	srv.Kill(t)
	checkReason(waitReady(false, "with Redis killed"), "store call failed")
	healthy("with Redis killed")
	getReady(t, dash.URL) // still down: no second log line for this outage
	srv.Restart(t)
	waitReady(true, "once Redis restarted")
	healthy("once Redis restarted")

	log := logs.String()
	if n := strings.Count(log, "not ready"); n != 2 {
		t.Errorf("%d \"not ready\" log lines for two outages, want 2:\n%s", n, log)
	}
	if n := strings.Count(log, "ready again"); n != 2 {
		t.Errorf("%d \"ready again\" log lines for two recoveries, want 2:\n%s", n, log)
	}
	if !strings.Contains(log, port) {
		t.Errorf("the log of a failed readiness check lacks the store's error (its address):\n%s", log)
	}
}

// TestDashboardReadyzLedgerNotMigrated: on SQLite, /readyz fails once the
// ledger's table is gone (its schema lacks the ledger), and /healthz does
// not care.
func TestDashboardReadyzLedgerNotMigrated(t *testing.T) {
	st, db := newSQLiteDB(t)
	dash := server(t, st, "", func(o *dashboard.Options) { o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) })
	if a := getReady(t, dash.URL); !a.Ready || a.Check != "ledger" {
		t.Fatalf("migrated SQLite: %+v, want ready on the ledger", a)
	}
	if _, err := db.ExecContext(context.Background(), "DROP TABLE tasklock_locks_jobs"); err != nil {
		t.Fatal(err)
	}
	clitest.WaitFor(t, 10*time.Second, func() bool { return !getReady(t, dash.URL).Ready }, "/readyz to fail without the ledger's table")
	if code, _, _ := call(t, nil, "GET", dash.URL+"/healthz", nil, ""); code != http.StatusOK {
		t.Errorf("/healthz without the ledger's table: %d, want 200", code)
	}
}

// TestDashboardReadyzChecks: memstore is asked its ledger; a negative
// ReadyTimeout is refused by name.
func TestDashboardReadyzChecks(t *testing.T) {
	if a := getReady(t, server(t, memstore.New(nil), "", nil).URL); !a.Ready || a.Check != "ledger" {
		t.Errorf("memstore: %+v, want ready on the ledger", a)
	}
	if _, err := dashboard.New(dashboard.Options{Store: memstore.New(nil), ReadyTimeout: -time.Second}); err == nil || !strings.Contains(err.Error(), "ReadyTimeout") {
		t.Errorf("negative ReadyTimeout: %v, want an error naming it", err)
	}
}
