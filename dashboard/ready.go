package dashboard

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tasklock/tasklock/internal/redact"
)

// readyCacheFor is how long a /readyz answer is reused: the endpoint needs
// no credentials, so callers, however many, make at most one store call
// per readyCacheFor (or per Options.ReadyTimeout, when the store hangs).
const readyCacheFor = time.Second

// readyState is the last readiness check. mu is held during a check, so
// concurrent probes wait for it and share its result.
type readyState struct {
	mu     sync.Mutex
	at     time.Time // when the last check ended; zero before the first
	check  string    // what it called: "ledger", "locks" or "none"
	reason string    // why the store is not ready; "" when it answered
}

// readyz is GET /readyz, the readiness probe: 200 {"ready": true, "check"}
// when the store answered one cheap call within Options.ReadyTimeout, 503
// {"ready": false, "check", "reason"} when it did not. Like /healthz it
// needs no credentials, so the reason says what failed, never the store's
// error (which can name hosts and users): that goes to the log, once per
// change from ready to not ready. An answer is reused for a second.
//
// "check" names the call: "ledger" (Ledger.JobStates, the call every
// scheduler makes twice a second; on a SQL store it reads the ledger's
// table, so it fails when the schema lacks it), "locks" (Lister.Leases of
// the node locks, for a store that keeps no ledger) or "none" (a store
// with neither: nothing to ask, always ready).
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	rs := &h.ready
	rs.mu.Lock()
	if rs.at.IsZero() || h.clock.Now().Sub(rs.at) >= readyCacheFor {
		// Not the request's context: a caller that hangs up must not
		// leave a cancelled check for the callers sharing it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.opts.ReadyTimeout)
		check, err := h.ping(ctx)
		reason := ""
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || pastDeadline(ctx):
			// Whatever the client library made of it: a socket's
			// deadline (an i/o timeout) can pass before ctx's timer fires.
			reason = "the store did not answer within " + h.opts.ReadyTimeout.String()
		default:
			reason = "the store call failed (the server's log has the error)"
		}
		cancel()
		switch {
		case err != nil && (rs.at.IsZero() || rs.reason == ""):
			h.log.Warn("dashboard: not ready: "+reason, "check", check, "err", redact.Text(err.Error()))
		case err == nil && rs.reason != "":
			h.log.Info("dashboard: ready again: the store answers", "check", check)
		}
		rs.at, rs.check, rs.reason = h.clock.Now(), check, reason
	}
	check, reason := rs.check, rs.reason
	rs.mu.Unlock()
	if reason != "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "check": check, "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true, "check": check})
}

// ping makes the cheapest call that shows the store serves what the
// dashboard and the schedulers need, and names it.
func (h *handler) ping(ctx context.Context) (check string, err error) {
	switch {
	case h.ledger != nil:
		_, err = h.ledger.JobStates(ctx)
		return "ledger", err
	case h.lister != nil:
		_, err = h.lister.Leases(ctx, h.opts.NodeKeyPrefix)
		return "locks", err
	default:
		return "none", nil
	}
}

// pastDeadline reports whether ctx's deadline has passed.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
