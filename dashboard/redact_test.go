package dashboard_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

// failingLister is a memstore whose Leases fails with an error that
// quotes the store's URL and DSN, passwords included, as a client
// library's error may.
type failingLister struct {
	*memstore.Store
	err error
}

func (f failingLister) Leases(context.Context, string) ([]driver.Lease, error) { return nil, f.err }

// TestStoreErrorsRedacted: a store error reaches neither an answer nor an
// event of /api/events with a password in it, and the rest of its text is
// intact (a one-letter password does not mangle "connection").
func TestStoreErrorsRedacted(t *testing.T) {
	storeErr := errors.New("dial redis://app:" + secret + "@db.example:6379/0 (dsn app:o@tcp(db:3306)/app): connection refused")
	srv := server(t, failingLister{memstore.New(nil), storeErr}, "", nil)
	const want = "dial redis://app:xxxxx@db.example:6379/0 (dsn app:xxxxx@tcp(db:3306)/app): connection refused"

	code, body, _ := call(t, nil, "GET", srv.URL+"/api/locks", nil, "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Errorf("/api/locks: %d %s, want 503 with %q", code, body, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var s struct{ Error string }
		decode(t, d, &s)
		if strings.Contains(d, secret) || strings.Contains(d, ":o@") || s.Error != "store: "+want {
			t.Errorf("event %s\nwant error %q", d, "store: "+want)
		}
		return
	}
	t.Fatalf("stream ended: %v", sc.Err())
}
