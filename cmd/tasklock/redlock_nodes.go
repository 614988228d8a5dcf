package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/redlock"
)

// redlockCheckTimeout bounds a check of a RedLock store's nodes: a node
// that has not answered PING by then is reported as not answering.
const redlockCheckTimeout = time.Second

// redlockNodesDown PINGs every node of s, the RedLock store storeURL
// opened, for at most redlockCheckTimeout, and returns one warning per
// node that did not answer (redlockNodeDown); none when all did. Its locks
// work on with a quorum and say nothing of a minority that failed them,
// so an operator would not know that fewer failures now stop every lock:
// locks list and show, and exec --verbose, print these.
func redlockNodesDown(ctx context.Context, s *redlock.Store, storeURL string) []string {
	ctx, cancel := context.WithTimeout(ctx, redlockCheckTimeout)
	defer cancel()
	h := s.Check(ctx)
	secrets := storeSecrets(storeURL)
	out := make([]string, 0, len(h.Failed))
	for _, ne := range h.Failed {
		out = append(out, redlockNodeDown(h, ne, secrets...))
	}
	return out
}

// redlockNodeDown says that ne, a node the check h found failing, does not
// answer or refuses the credentials, why (its error, with secrets and any
// URL's password hidden), and how many more nodes may fail before every
// lock stops:
//
//	redlock node 127.0.0.1:6381 does not answer (dial tcp ...: connection refused); locks need 2 of the 3 nodes, so 0 more may fail before every lock stops
func redlockNodeDown(h redlock.Health, ne *redlock.NodeError, secrets ...string) string {
	what := "does not answer"
	if storeurl.RefusedCredentials(ne.Err) {
		what = "refuses the credentials"
	}
	return fmt.Sprintf("redlock node %s %s (%s); locks need %d of the %d nodes, so %d more may fail before every lock stops",
		redact.Printable(ne.Addr), what, redact.Printable(redact.Text(ne.Err.Error(), secrets...)), h.Quorum, h.Nodes, h.Spare())
}
