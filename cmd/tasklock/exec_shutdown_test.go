//go:build unix

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestExecLostStoreWarningNamesItsLease checks the warning exec gives when
// the store does not answer after a loss: it says how the lease ends on the
// store in use, and names etcd or ZooKeeper sessions only for those stores.
func TestExecLostStoreWarningNamesItsLease(t *testing.T) {
	for _, tt := range []struct {
		store string
		want  string
	}{
		{"redis://127.0.0.1:6379", "the lease ends at the store at its TTL"},
		{"postgres://u:p@127.0.0.1/db", "the lease ends at the store at its TTL"},
		{"sqlite:///tmp/x.db", "the lease ends at the store at its TTL"},
		{"etcd://127.0.0.1:2379", "the etcd session) ends at the store at its session_ttl"},
		{"zk://127.0.0.1:2181", "the ZooKeeper session) ends at the store at its session_timeout"},
	} {
		var log bytes.Buffer
		e := &execRun{c: &execConfig{store: tt.store}, log: slog.New(slog.NewTextHandler(&log, nil)), lostBy: time.Now()}
		// A store that does not answer: closing it blocks until the
		// warning was given.
		block := make(chan struct{})
		e.shutdown(nil, func() error { <-block; return nil })
		close(block)
		got := log.String()
		if !strings.Contains(got, "the store did not answer") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: warning %q, want it to say %q", tt.store, got, tt.want)
		}
		session := strings.HasPrefix(tt.store, "etcd") || strings.HasPrefix(tt.store, "zk")
		if !session && (strings.Contains(got, "etcd") || strings.Contains(got, "ZooKeeper")) {
			t.Errorf("%s: warning %q names another store's session", tt.store, got)
		}
	}
}
