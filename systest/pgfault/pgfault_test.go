package pgfault

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, proxy.IgnoreToxics)) }

var modes = []pgstore.Mode{pgstore.ModeLease, pgstore.ModeConnection}

// newPool opens a pool on url, closed at cleanup.
func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// tableSeq gives every store of the test binary its own table.
var tableSeq atomic.Int64

func freshTable() string { return fmt.Sprintf("locks_%d", tableSeq.Add(1)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// quietLogger drops the Locker's warnings (an expected loss is not news).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLocker(t *testing.T, s *pgstore.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLogger})
}

// TestFaults runs the fault tests in both modes.
func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, mode pgstore.Mode)
	}{
		{"NetworkBlackholed", testBlackholed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range modes {
				t.Run(string(mode), func(t *testing.T) {
					t.Parallel()
					tc.fn(t, mode)
				})
			}
		})
	}
}

// testBlackholed: the holder's traffic to the database is blackholed by a
// proxy. Its Done closes before its lease could end at the server, and
// another (connected directly) obtains only after that.
func testBlackholed(t *testing.T, mode pgstore.Mode) {
	srv := testserver.StartPostgres(t)
	url := srv.CreateDB(t)
	table := freshTable()
	ds, err := pgstore.New(newPool(t, url), &pgstore.Options{Table: table, Mode: mode, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	proxy := proxy.Start(t, srv.Addr())
	proxied := strings.Replace(url, srv.Addr(), proxy.Addr(), 1)
	hpool := newPool(t, proxied)
	hs, err := pgstore.New(hpool, &pgstore.Options{Table: table, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	holder := newLocker(t, hs, "holder")
	other := newLocker(t, ds, "other")
	l1, err := holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Let at least one renewal through, then cut the holder off.
	work := faulttest.StartWork(t, l1)
	proxy.Blackhole(t)
	cut := time.Now()

	tk := work.AwaitTakeover(t, l1, other, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second, Wait: 10 * time.Second},
		cut, ttl+time.Second, "TTL + 1s")
	tk.Check(t, work, string(mode)+": ")
	acc, rej := work.Reg.Counts()
	t.Logf("%s: register: %d accepted, %d rejected (the probe above)", mode, acc, rej)
	proxy.Restore(t)
}
