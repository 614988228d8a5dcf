package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
)

// summary is what /api/events pushes: counts, and a fingerprint per section
// so that a page can tell whether what it shows changed.
type summary struct {
	At          time.Time         `json:"at"`
	Locks       int               `json:"locks"`
	Running     int               `json:"running"`
	NodesAlive  int               `json:"nodes_alive"`
	Paused      int               `json:"paused"`
	Triggers    int               `json:"pending_triggers"`
	LatestRun   string            `json:"latest_run,omitempty"` // "job tick status"
	Fingerprint map[string]string `json:"fingerprint"`          // section -> hash
	Changed     []string          `json:"changed"`              // sections changed since the previous event on this stream
	Error       string            `json:"error,omitempty"`
}

// sections are the parts of the dashboard a change can touch.
var sections = []string{"jobs", "runs", "locks", "nodes"}

// summaryCache shares one summary among every open event stream, so that
// the store is read once per interval whatever the number of browsers.
type summaryCache struct {
	mu  sync.Mutex
	at  time.Time
	cur summary
	ok  bool
}

func (c *summaryCache) invalidate() {
	c.mu.Lock()
	c.ok = false
	c.mu.Unlock()
}

// summary returns the current summary, reading the store at most once per
// half interval: three calls (Leases, JobStates, Runs with Limit 20).
func (h *handler) summary(ctx context.Context) summary {
	c := &h.sum
	c.mu.Lock()
	defer c.mu.Unlock()
	now := h.clock.Now()
	if c.ok && now.Sub(c.at) < h.opts.EventInterval/2 {
		return c.cur
	}
	s := summary{At: now.UTC(), Fingerprint: map[string]string{}}
	hash := func(section string, parts ...string) {
		f := fnv.New64a()
		for _, p := range parts {
			f.Write([]byte(p))
			f.Write([]byte{0})
		}
		s.Fingerprint[section] = fmt.Sprintf("%x", f.Sum64())
	}
	fail := func(err error) summary {
		s.Error = "store: " + redact.Text(err.Error())
		return s
	}
	var lockParts, nodeParts, jobParts []string
	if h.lister != nil {
		ls, err := h.lister.Leases(ctx, "")
		if err != nil {
			return fail(err)
		}
		h.noteLeases(ls, true)
		slices.SortFunc(ls, func(a, b driver.Lease) int { return strings.Compare(a.Key, b.Key) })
		s.Locks = len(ls)
		for _, l := range ls {
			p := fmt.Sprintf("%s %s %d", l.Key, l.Owner, l.Fence)
			lockParts = append(lockParts, p)
			switch {
			case strings.HasPrefix(l.Key, h.opts.NodeKeyPrefix):
				s.NodesAlive++
				nodeParts = append(nodeParts, p)
			case l.Key == h.opts.LeaderKey: // a new leader or term changes the nodes page
				nodeParts = append(nodeParts, p)
			case strings.HasPrefix(l.Key, h.opts.KeyPrefix):
				s.Running++
				jobParts = append(jobParts, p)
			}
		}
	}
	var runParts []string
	if h.ledger != nil {
		sts, err := h.ledger.JobStates(ctx)
		if err != nil {
			return fail(err)
		}
		slices.SortFunc(sts, func(a, b ledger.JobState) int { return strings.Compare(a.Job, b.Job) })
		for _, st := range sts {
			if st.Paused {
				s.Paused++
			}
			s.Triggers += len(st.Triggers)
			jobParts = append(jobParts, fmt.Sprintf("%s %t %d", st.Job, st.Paused, len(st.Triggers)))
		}
		rs, err := h.ledger.Runs(ctx, ledger.RunQuery{Limit: 20})
		if err != nil {
			return fail(err)
		}
		for i, r := range rs {
			p := fmt.Sprintf("%s %d %s %d %s %d", r.Job, r.Tick.UnixNano(), r.Trigger, r.Attempt, r.Status, r.Recorded.UnixNano())
			if i == 0 {
				s.LatestRun = r.Job + " " + r.Tick.UTC().Format(time.RFC3339) + " " + string(r.Status)
			}
			runParts = append(runParts, p)
		}
		jobParts = append(jobParts, runParts...)
	}
	hash("locks", lockParts...)
	hash("nodes", append(nodeParts, runParts...)...)
	hash("jobs", jobParts...)
	hash("runs", runParts...)
	if c.cur.Fingerprint != nil && c.cur.Fingerprint["runs"] != s.Fingerprint["runs"] {
		h.recentStale.Store(true)
	}
	c.cur, c.at, c.ok = s, now, true
	return s
}

// events is GET /api/events: a server-sent event stream. Every
// EventInterval, and at once when it opens, it sends an event "summary"
// whose data is a JSON summary naming the sections changed since the
// previous event (all of them in the first).
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", (2 * h.opts.EventInterval).Milliseconds())
	fl.Flush()
	ctx := r.Context()
	var prev map[string]string
	t := h.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		sctx, cancel := context.WithTimeout(ctx, callTimeout)
		s := h.summary(sctx)
		cancel()
		s.Changed = []string{}
		for _, sec := range sections {
			if s.Error == "" && (prev == nil || prev[sec] != s.Fingerprint[sec]) {
				s.Changed = append(s.Changed, sec)
			}
		}
		if s.Error == "" {
			prev = s.Fingerprint
		}
		b, _ := json.Marshal(s)
		if _, err := fmt.Fprintf(w, "event: summary\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		t.Reset(h.opts.EventInterval)
	}
}
