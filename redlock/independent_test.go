package redlock

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// TestCheckIndependent checks that two addresses of one server (127.0.0.1
// and localhost) are refused, naming both, while independent servers, a
// replica and a node that is down pass.
func TestCheckIndependent(t *testing.T) {
	srvs := startNodes(t, 2)
	_, port, _ := net.SplitHostPort(srvs[0].Addr())
	alias := net.JoinHostPort("localhost", port)
	replica := testserver.StartRedis(t, testserver.WithRedisArgs("--replicaof", "127.0.0.1", port))
	down := testserver.ClosedAddr(t)

	for _, tc := range []struct {
		name        string
		addrs       []string
		first, dupe int // the clients reported; dupe 0: none
	}{
		{"independent", []string{srvs[0].Addr(), srvs[1].Addr(), replica.Addr()}, 0, 0},
		{"one down", []string{srvs[0].Addr(), down, srvs[1].Addr()}, 0, 0},
		{"alias", []string{srvs[0].Addr(), alias, srvs[1].Addr()}, 0, 1},
		{"alias with one down", []string{down, alias, srvs[1].Addr(), srvs[0].Addr(), replica.Addr()}, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clients := newClients(t, tc.addrs)
			if _, err := New(clients, nil); err != nil {
				t.Fatalf("New: %v (the addresses differ as text)", err)
			}
			err := CheckIndependent(ctxT(t), clients)
			if tc.dupe == 0 {
				if err != nil {
					t.Fatalf("CheckIndependent = %v, want nil", err)
				}
				return
			}
			var oe *driver.OptionError
			var se *SameServerError
			if !errors.As(err, &oe) || !errors.As(err, &se) {
				t.Fatalf("CheckIndependent = %v, want a *driver.OptionError wrapping a *SameServerError", err)
			}
			if oe.Field != "clients["+strconv.Itoa(tc.dupe)+"]" || se.First != tc.first || se.Second != tc.dupe ||
				se.FirstAddr != tc.addrs[tc.first] || se.SecondAddr != tc.addrs[tc.dupe] || se.RunID == "" {
				t.Fatalf("CheckIndependent = %#v in %#v, want clients %d and %d", se, oe, tc.first, tc.dupe)
			}
			for _, want := range []string{tc.addrs[tc.first], tc.addrs[tc.dupe], "same Redis server", "run_id " + se.RunID} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			t.Log(err)
		})
	}
}

// TestCheckIndependentNilClient checks that a nil client, which New
// refuses, is skipped rather than dereferenced.
func TestCheckIndependentNilClient(t *testing.T) {
	var nilClient *redis.Client
	if err := CheckIndependent(ctxT(t), []redis.UniversalClient{nil, nilClient}); err != nil {
		t.Fatalf("CheckIndependent = %v, want nil", err)
	}
}
