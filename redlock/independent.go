package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// SameServerError says that two of the clients given to CheckIndependent
// reach the same Redis server: its INFO server reports the same run_id
// through both.
type SameServerError struct {
	First, Second         int    // the clients' indexes, First < Second
	FirstAddr, SecondAddr string // their addresses (Options().Addr, or "clients[i]")
	RunID                 string // the server's run_id
}

// Error implements error.
func (e *SameServerError) Error() string {
	return fmt.Sprintf("%s (clients[%d]) and %s (clients[%d]) are the same Redis server (same run_id %s): the nodes must be independent servers",
		e.FirstAddr, e.First, e.SecondAddr, e.Second, e.RunID)
}

// CheckIndependent asks the server of every client for its run_id (INFO
// server), all at once, and returns a *driver.OptionError wrapping a
// *SameServerError when two clients reach the same server. New does no
// I/O and compares addresses only, so it cannot see two names for one
// server (localhost and 127.0.0.1, a DNS alias, a port forward): that
// server would carry two votes, and its loss or restart would cost the
// quorum two nodes at once. Call CheckIndependent with the clients given
// to New, before trusting the Store.
//
// It waits for every server until ctx ends. A client whose server fails to
// answer (down, cut off, or still silent when ctx ends), refuses INFO (an
// ACL user without it) or answers without a run_id is not compared: RedLock
// runs on with a minority of its nodes down, and so may its caller. Nodes
// that replicate each other are not found either: a replica has its own
// run_id. It returns nil when no two servers that answered are one.
func CheckIndependent(ctx context.Context, clients []redis.UniversalClient) error {
	ids := make([]string, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		if cl, ok := c.(*redis.Client); c == nil || (ok && cl == nil) {
			continue // New refuses it
		}
		wg.Go(func() {
			info, err := c.Info(ctx, "server").Result()
			if err == nil {
				ids[i] = runID(info)
			}
		})
	}
	wg.Wait()
	for j, id := range ids {
		if id == "" {
			continue
		}
		for i, other := range ids[:j] {
			if other == id {
				e := &SameServerError{First: i, Second: j, FirstAddr: clientAddr(i, clients[i]), SecondAddr: clientAddr(j, clients[j]), RunID: id}
				return &driver.OptionError{Pkg: "redlock", Field: fmt.Sprintf("clients[%d]", j), Err: e}
			}
		}
	}
	return nil
}

// runID returns the run_id line's value of an INFO reply; "" when there is
// none.
func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// clientAddr names clients[i] as a NodeError does: its address, or
// "clients[i]" for a Sentinel failover client (whose master moves) or a
// client of another type.
func clientAddr(i int, uc redis.UniversalClient) string {
	if c, ok := uc.(*redis.Client); ok && c != nil {
		if addr := c.Options().Addr; addr != "FailoverClient" {
			return addr
		}
	}
	return "clients[" + strconv.Itoa(i) + "]"
}
