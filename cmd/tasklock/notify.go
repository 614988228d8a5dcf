//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// Notifications (notify: in the configuration; see serveUsage and the
// README) are decided from the ledger, so that whichever node records a
// tick's outcome decides as any other would:
//
//   - The node that records a tick's final outcome — its last attempt
//     (schedule.EventTickEnded), a missed tick (EventMissed), or another
//     node's attempt it settles as interrupted (EventRunInterrupted) —
//     reads the job's history and finds the outcome before it: the final
//     record (highest attempt) of the newest earlier tick of the same
//     shard whose outcome counts. Running ticks, skipped and cancelled ones
//     do not count: they say nothing of the job's health.
//   - The outcome's event is failure, timeout, lost, missed or
//     interrupted for those statuses; an ok after one of them is
//     recovery. The same event as the previous outcome's sends nothing: a
//     job failing five ticks in a row notifies once, then once when it
//     recovers. A record the ledger no longer shows as it was reported
//     (an interrupted run whose node recorded the outcome after all), or
//     that a later attempt of the same tick followed, sends nothing.
//   - The notification is claimed in the ledger, like a tick, under the
//     key (job, previous outcome's tick, "notify:EVENT/" + its trigger,
//     shard) — or the tick's own, when it is the job's first — so that
//     one transition is sent once across the fleet, also when two nodes
//     decide it (a slow node and the one that settled its run as
//     interrupted). Tick claims use the trigger "", a trigger request's
//     ID (hex, or starting bf- or rr-), "backfill", or one of those and
//     "~NODE": none starts with "notify:".
//   - The node that claimed it delivers it to each target, retrying as
//     notify: says, and logs every attempt in the ledger's audit list
//     (apijson.NotifyAction). A node that stops while delivering leaves
//     the rest undelivered: at most once, not at least once.

// notifyQueue bounds the outcomes waiting to be decided on one node; more
// are dropped, with a warning.
const notifyQueue = 4096

// notifyFirst is how many run records the first read of a job's history
// takes (the tick's own and, most often, the one before it), notifyScan
// how many each further read takes, and notifyPages how many reads at most
// look for the previous outcome.
const (
	notifyFirst = 8
	notifyScan  = 100
	notifyPages = 5
)

// notifyDeciders is how many outcomes one node decides at once: each costs
// a read of the ledger, and a claim when it is a change.
const notifyDeciders = 4

// maxNotifyOutput bounds the run's output tail a notification carries.
const maxNotifyOutput = 4 << 10

// notifyStoreTimeout bounds each store call of the notifier.
const notifyStoreTimeout = 10 * time.Second

// notifier decides and delivers one serve's notifications.
type notifier struct {
	ledger  ledger.Ledger
	catalog ledger.Catalog // nil: deliveries are only logged (serve's log)
	node    string
	token   string // this notifier's claims' token
	retain  time.Duration
	log     *slog.Logger
	// config returns the job's notifications (config.Merge), nil when it
	// has none.
	config  func(job string) *config.Notify
	redact  func(string) string
	client  *http.Client
	version string
	now     func() time.Time
	// sent is tasklock_notifications_total{job, event, result}; nil: none.
	sent *prometheus.CounterVec

	qmu    sync.RWMutex // guards closing queue against event's sends
	closed bool
	queue  chan schedule.Event
	ctx    context.Context // ends when deliveries must stop
	cancel context.CancelFunc
	done   chan struct{} // closed when the decider goroutines end
	wg     sync.WaitGroup
	stop   sync.Once
}

// newNotifier starts a notifier's decider goroutine; stop ends it.
func newNotifier(n *notifier) *notifier {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	n.token = "notify-" + hex.EncodeToString(tok[:])
	if n.now == nil {
		n.now = time.Now
	}
	if n.client == nil {
		n.client = &http.Client{}
	}
	if n.redact == nil {
		n.redact = func(s string) string { return s }
	}
	if n.retain <= 0 {
		n.retain = schedule.DefaultClaimRetention
	}
	n.queue = make(chan schedule.Event, notifyQueue)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.done = make(chan struct{})
	var deciders sync.WaitGroup
	for range notifyDeciders {
		deciders.Add(1)
		go func() { defer deciders.Done(); n.decide() }()
	}
	go func() { deciders.Wait(); close(n.done) }()
	return n
}

// event is the Schedulers' OnEvent hook (through the observer): it queues
// the final outcomes of jobs that notify, without blocking.
func (n *notifier) event(e schedule.Event) {
	switch e.Type {
	case schedule.EventTickEnded, schedule.EventMissed, schedule.EventRunInterrupted:
	default:
		return
	}
	cfg := n.config(e.Job)
	if cfg == nil {
		return
	}
	if ev := eventOf(e.Status); ev != "" && !cfg.Wants(ev) || e.Status == ledger.RunOK && !cfg.Wants(config.EventRecovery) {
		return // cannot be notified: spare the ledger a read
	}
	n.qmu.RLock()
	defer n.qmu.RUnlock()
	if n.closed {
		return
	}
	select {
	case n.queue <- e:
	default:
		n.log.Warn("notify: too many outcomes waiting to be decided; this one is dropped", "job", e.Job, "tick", e.Tick, "status", e.Status)
	}
}

// stopNotifier stops taking outcomes, decides those queued, and waits up
// to wait for the deliveries under way; then it stops them.
func (n *notifier) stopNotifier(wait time.Duration) {
	n.stop.Do(func() {
		n.qmu.Lock()
		n.closed = true
		close(n.queue)
		n.qmu.Unlock()
		t := time.NewTimer(wait)
		defer t.Stop()
		all := make(chan struct{})
		go func() { <-n.done; n.wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-t.C:
			n.log.Warn("notify: stopping deliveries still under way", "waited", wait)
			n.cancel()
			<-all
		}
		n.cancel()
	})
}

func (n *notifier) decide() {
	for e := range n.queue {
		n.handle(e)
	}
}

// notification is one decided notification: the body every target gets.
type notification struct {
	ID             string     `json:"id"`
	Event          string     `json:"event"`
	Job            string     `json:"job"`
	Tick           time.Time  `json:"tick"`
	Trigger        string     `json:"trigger,omitempty"`
	Shard          int        `json:"shard"`
	Shards         int        `json:"shards,omitempty"`
	Attempt        int        `json:"attempt"`
	Node           string     `json:"node"` // where the run ran
	Status         string     `json:"status"`
	Error          string     `json:"error,omitempty"`
	Output         string     `json:"output,omitempty"` // the tail, at most maxNotifyOutput bytes
	PreviousStatus string     `json:"previous_status,omitempty"`
	PreviousTick   *time.Time `json:"previous_tick,omitempty"`
	Time           time.Time  `json:"time"`        // when it was decided
	NotifiedBy     string     `json:"notified_by"` // the node that sends it
}

// eventOf is the notification event of a final status; "" for ok and the
// statuses that do not count.
func eventOf(st ledger.RunStatus) string {
	switch st {
	case ledger.RunFailed:
		return config.EventFailure
	case ledger.RunTimeout:
		return config.EventTimeout
	case ledger.RunLost:
		return config.EventLost
	case ledger.RunMissed:
		return config.EventMissed
	case ledger.RunInterrupted:
		return config.EventInterrupted
	}
	return ""
}

// counts reports whether a tick's final status says something of the
// job's health: ok and the bad ones, not running, skipped or cancelled.
func counts(st ledger.RunStatus) bool { return st == ledger.RunOK || eventOf(st) != "" }

// handle decides whether e's outcome is a transition to notify, claims it
// and starts its deliveries.
func (n *notifier) handle(e schedule.Event) {
	cfg := n.config(e.Job)
	if cfg == nil {
		return
	}
	cur, prev, ok := n.outcomes(e)
	if !ok {
		return
	}
	n.log.Debug("notify: outcome", "job", e.Job, "tick", cur.Tick, "status", cur.Status, "previous", prev != nil)
	event := eventOf(cur.Status)
	switch {
	case cur.Status == ledger.RunOK && prev != nil && cfg.Wants(eventOf(prev.Status)):
		event = config.EventRecovery
	case event == "" || prev != nil && eventOf(prev.Status) == event:
		return
	}
	if !cfg.Wants(event) {
		return
	}
	base := cur
	claim := "notify:" + event + "/first/" + cur.Trigger
	if prev != nil {
		base, claim = prev, "notify:"+event+"/"+prev.Trigger
	}
	if !n.claim(ledger.ClaimParams{Job: e.Job, Tick: base.Tick, Trigger: claim, Shard: e.Shard}) {
		return
	}
	sum := sha256.Sum256([]byte(e.Job + "\x00" + base.Tick.UTC().Format(time.RFC3339Nano) + "\x00" + claim + "\x00" + strconv.Itoa(e.Shard)))
	msg := notification{
		ID: hex.EncodeToString(sum[:16]), Event: event, Job: e.Job, Tick: cur.Tick.UTC(), Trigger: cur.Trigger,
		Shard: cur.Shard, Shards: cur.Shards, Attempt: cur.Attempt, Node: cur.Node, Status: string(cur.Status),
		Error: cur.Error, Output: lastBytes(cur.Output, maxNotifyOutput), Time: n.now().UTC(), NotifiedBy: n.node,
	}
	if prev != nil {
		t := prev.Tick.UTC()
		msg.PreviousStatus, msg.PreviousTick = string(prev.Status), &t
	}
	body, err := json.Marshal(msg)
	if err != nil {
		n.log.Error("notify: encoding the notification", "job", e.Job, "err", err)
		return
	}
	n.log.Info("notify: sending", "job", e.Job, "event", event, "tick", msg.Tick, "status", msg.Status, "id", msg.ID)
	if cfg.Webhook != nil {
		n.deliver(cfg, &msg, body, n.webhookAttempt(cfg.Webhook, &msg, body), "webhook "+redact.URL(cfg.Webhook.URL))
	}
	if cfg.Command != nil {
		n.deliver(cfg, &msg, body, n.commandAttempt(cfg, &msg, body), "command "+cfg.Command[0])
	}
}

// lastBytes is the last max bytes of s, cut at a character boundary.
func lastBytes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-max:], "")
}

// outcomes reads e's final record and the previous outcome from the
// ledger; ok is false when e's record is not the tick's final outcome
// (any more), or the ledger cannot be read.
func (n *notifier) outcomes(e schedule.Event) (cur, prev *ledger.RunRecord, ok bool) {
	// To is a second on, not a nanosecond: stores may keep ticks at a
	// coarser precision. The later ticks it lets in are passed over.
	q := ledger.RunQuery{Job: e.Job, To: e.Tick.Add(time.Second), Limit: notifyFirst}
	type group struct {
		tick    time.Time
		trigger string
	}
	var last *group
	for range notifyPages {
		ctx, cancel := context.WithTimeout(n.ctx, notifyStoreTimeout)
		rs, err := n.ledger.Runs(ctx, q)
		cancel()
		if err != nil {
			n.log.Error("notify: reading the job's history; this outcome is not notified", "job", e.Job, "tick", e.Tick, "err", err)
			return nil, nil, false
		}
		for i := range rs {
			r := &rs[i]
			if r.Shard != e.Shard || r.Tick.After(e.Tick) {
				continue
			}
			first := last == nil || !last.tick.Equal(r.Tick) || last.trigger != r.Trigger
			last = &group{r.Tick, r.Trigger}
			if !first {
				continue // an earlier attempt of a tick already judged
			}
			if r.Tick.Equal(e.Tick) {
				if r.Trigger != e.Trigger {
					continue
				}
				if r.Attempt != e.Attempt || r.Status != e.Status {
					n.log.Debug("notify: the outcome was settled otherwise since, or retried", "job", e.Job, "tick", e.Tick,
						"attempt", e.Attempt, "status", e.Status, "ledger_attempt", r.Attempt, "ledger_status", r.Status)
					return nil, nil, false
				}
				rc := *r
				cur = &rc
				continue
			}
			if cur == nil {
				n.log.Debug("notify: the outcome is not in the ledger", "job", e.Job, "tick", e.Tick, "attempt", e.Attempt)
				return nil, nil, false
			}
			if counts(r.Status) {
				rc := *r
				return cur, &rc, true
			}
		}
		if len(rs) < q.Limit {
			break
		}
		k := rs[len(rs)-1].Key()
		q.Before, q.Limit = &k, notifyScan
	}
	return cur, nil, cur != nil
}

// claim claims a notification's key; it reports whether this node is to
// send it. A failed call is repeated with the same token (a claim this
// token made already succeeds again).
func (n *notifier) claim(p ledger.ClaimParams) bool {
	p.Node, p.Token, p.Retain = n.node, n.token, n.retain
	var err error
	for try := range 3 {
		if try > 0 && !n.sleep(time.Duration(try)*time.Second) {
			break
		}
		ctx, cancel := context.WithTimeout(n.ctx, notifyStoreTimeout)
		var res []error
		res, err = n.ledger.Claim(ctx, []ledger.ClaimParams{p})
		cancel()
		if err == nil {
			if res[0] != nil {
				n.log.Debug("notify: claimed by another node", "job", p.Job, "key", p.Trigger, "err", res[0])
				return false
			}
			return true
		}
	}
	n.log.Error("notify: cannot claim the notification; it is not sent", "job", p.Job, "key", p.Trigger, "err", err)
	return false
}

// sleep waits d; false when the notifier is stopped first.
func (n *notifier) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.ctx.Done():
		return false
	}
}

// attemptResult is what one delivery attempt did.
type attemptResult struct {
	code  int
	err   error
	retry bool // the error may pass: try again
}

// deliver makes the attempts of one target in the background, logging
// each, with exponential backoff and jitter, within cfg's bounds.
func (n *notifier) deliver(cfg *config.Notify, msg *notification, body []byte, try func(context.Context, int) attemptResult, target string) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		start := n.now()
		result := "failed"
		for attempt := 1; ; attempt++ {
			res := try(n.ctx, attempt)
			d := apijson.Delivery{
				ID: msg.ID, Event: msg.Event, Tick: msg.Tick, Trigger: msg.Trigger, Shard: msg.Shard, Status: msg.Status,
				Target: target, Attempt: attempt, Code: res.code,
			}
			if res.err != nil {
				d.Error = n.redact(res.err.Error())
			}
			var wait time.Duration
			switch {
			case res.err == nil:
				d.Result, result = "delivered", "delivered"
			case res.retry && attempt < cfg.Attempts && n.ctx.Err() == nil:
				backoff := min(cfg.Backoff<<min(attempt-1, 20), time.Hour)
				wait = backoff/2 + mrand.N(backoff/2+1) // jitter: half to all of it
				if n.now().Add(wait).Sub(start) <= cfg.MaxTime {
					next := n.now().Add(wait).UTC()
					d.Result, d.NextRetry = "retrying", &next
					break
				}
				d.Result = "failed"
				d.Error += fmt.Sprintf(" (giving up: the next attempt would start after notify.max_time %v)", cfg.MaxTime)
			default:
				d.Result = "failed"
			}
			n.logDelivery(msg.Job, d)
			if d.Result != "retrying" {
				break
			}
			if !n.sleep(wait) {
				break
			}
		}
		if n.sent != nil {
			n.sent.WithLabelValues(msg.Job, msg.Event, result).Inc()
		}
	}()
}

// logDelivery keeps one attempt in the audit list (when the store keeps
// one) and in serve's log.
func (n *notifier) logDelivery(job string, d apijson.Delivery) {
	level := slog.LevelInfo
	if d.Result != "delivered" {
		level = slog.LevelWarn
	}
	n.log.Log(context.Background(), level, "notify: delivery attempt", "job", job, "event", d.Event, "id", d.ID, "target", d.Target,
		"attempt", d.Attempt, "code", d.Code, "result", d.Result, "err", d.Error)
	if n.catalog == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyStoreTimeout)
	defer cancel()
	err := n.catalog.AppendAudit(ctx, ledger.AuditEntry{
		Who: apijson.NotifyWhoPrefix + n.node, Job: job, Action: apijson.NotifyAction, Detail: apijson.DeliveryDetail(d),
	})
	if err != nil {
		n.log.Warn("notify: logging a delivery attempt in the audit list", "job", job, "err", err)
	}
}

// maxResponse bounds how much of a webhook's response is read.
const maxResponse = 4 << 10

// webhookAttempt returns the attempts of a webhook: a POST of body, signed
// with the secret over "TIMESTAMP.BODY".
func (n *notifier) webhookAttempt(w *config.Webhook, msg *notification, body []byte) func(context.Context, int) attemptResult {
	return func(ctx context.Context, attempt int) attemptResult {
		secret := w.Secret
		if secret == "" && w.SecretEnv != "" {
			secret = os.Getenv(w.SecretEnv)
		}
		if secret == "" {
			return attemptResult{err: fmt.Errorf("notify.webhook.secret_env: $%s is not set on node %s", w.SecretEnv, n.node)}
		}
		ctx, cancel := context.WithTimeout(ctx, w.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
		if err != nil {
			return attemptResult{err: redact.Error(fmt.Errorf("webhook request: %w", err), secret)}
		}
		ts := strconv.FormatInt(n.now().Unix(), 10)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "tasklock/"+n.version)
		req.Header.Set("X-Tasklock-Event", msg.Event)
		req.Header.Set("X-Tasklock-Delivery", msg.ID)
		req.Header.Set("X-Tasklock-Attempt", strconv.Itoa(attempt))
		req.Header.Set("X-Tasklock-Timestamp", ts)
		req.Header.Set("X-Tasklock-Signature", "sha256="+signature(secret, ts, body))
		resp, err := n.client.Do(req)
		if err != nil {
			// A *url.Error names the URL: its secrets are hidden.
			return attemptResult{err: redact.Error(err, secret), retry: true}
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
		code := resp.StatusCode
		switch {
		case code >= 200 && code < 300:
			return attemptResult{code: code}
		case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
			return attemptResult{code: code, err: fmt.Errorf("HTTP %s", resp.Status), retry: true}
		}
		return attemptResult{code: code, err: fmt.Errorf("HTTP %s: not retried", resp.Status)}
	}
}

// signature is the hex HMAC-SHA256 of "TIMESTAMP.BODY" under secret: the
// X-Tasklock-Signature header's value after "sha256=".
func signature(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// notifyEnvNames are the variables a notification command gets.
var notifyEnvNames = []string{"TASKLOCK_EVENT", "TASKLOCK_JOB", "TASKLOCK_TICK", "TASKLOCK_STATUS", "TASKLOCK_NODE", "TASKLOCK_DELIVERY", "TASKLOCK_ATTEMPT"}

// commandAttempt returns the attempts of the command hook: it runs as a
// job's command does (no shell, its own process group, serve's
// environment without any TASKLOCK_* variable), with the notification as
// JSON on stdin and TASKLOCK_EVENT, _JOB, _TICK, _STATUS, _NODE (where the
// run ran), _DELIVERY and _ATTEMPT set; exit status 0 delivers it.
func (n *notifier) commandAttempt(cfg *config.Notify, msg *notification, body []byte) func(context.Context, int) attemptResult {
	return func(ctx context.Context, attempt int) attemptResult {
		vals := []string{msg.Event, msg.Job, msg.Tick.Format(time.RFC3339), msg.Status, msg.Node, msg.ID, strconv.Itoa(attempt)}
		set := make([]string, len(vals))
		for i, v := range vals {
			set[i] = notifyEnvNames[i] + "=" + v
		}
		var out bytes.Buffer
		lw := &limitWriter{w: &out, n: maxResponse}
		ch, err := startCommand(commandSpec{
			argv: cfg.Command, env: childEnv(os.Environ(), set...), stdin: bytes.NewReader(body),
			stdout: lw, stderr: lw, waitDelay: time.Second,
		})
		if err != nil {
			return attemptResult{err: fmt.Errorf("cannot run %s: %w", cfg.Command[0], err)}
		}
		t := time.NewTimer(cfg.CommandTimeout)
		defer t.Stop()
		select {
		case <-ch.done:
		case <-t.C:
			ch.signal(syscall.SIGKILL)
			<-ch.done
			return attemptResult{err: fmt.Errorf("command killed after notify.command_timeout %v", cfg.CommandTimeout), retry: true}
		case <-ctx.Done():
			ch.signal(syscall.SIGKILL)
			<-ch.done
			return attemptResult{err: errors.New("command killed: serve stops"), retry: false}
		}
		ch.signal(syscall.SIGKILL) // nothing it started runs on
		code := statusCode(ch.status)
		if code == 0 {
			return attemptResult{}
		}
		text := strings.TrimSpace(out.String())
		if text != "" {
			text = ": " + lastBytes(text, 512)
		}
		return attemptResult{code: code, err: fmt.Errorf("command %s%s", describeStatus(ch.status), text), retry: true}
	}
}

// limitWriter keeps the first n bytes written to it and drops the rest.
type limitWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int
}

// Write implements io.Writer; it never fails.
func (l *limitWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// notifyStopWait is how long a stopping serve waits for deliveries under
// way.
const notifyStopWait = 10 * time.Second

// startNotifier starts serve's notifier; the caller stops it.
func (s *server) startNotifier() *notifier {
	return newNotifier(&notifier{
		ledger: s.ledger, catalog: s.catalog, node: s.node, log: s.log, config: s.notifyFor,
		redact: s.redact, client: s.client, version: version(), sent: s.obs.notifications,
	})
}

// scheduleEvent is the Schedulers' OnEvent: metrics and log lines, then
// notifications.
func (s *server) scheduleEvent(e schedule.Event) {
	s.obs.scheduleEvent(e)
	if s.notify != nil {
		s.notify.event(e)
	}
}

// notifyFor returns the notifications of a job in force: the file's
// notify: with the job's own keys in place of its (config.Merge); nil when
// it has none.
func (s *server) notifyFor(job string) *config.Notify {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notifyOf != s.file || s.notifyGen != s.rtGen {
		s.notifyOf, s.notifyGen = s.file, s.rtGen
		m := make(map[string]*config.Notify, len(s.file.Jobs)+len(s.rtJobs))
		for _, j := range s.rtJobs {
			if n := config.Merge(s.file.Notify, j.Notify); n != nil {
				m[j.Name] = n
			}
		}
		for _, j := range s.file.Jobs {
			m[j.Name] = config.Merge(s.file.Notify, j.Notify)
		}
		s.notifyCfg = m
	}
	return s.notifyCfg[job]
}

// notifyFields describe a job's notifications on its dashboard page: the
// events and the targets, the webhook's URL through redact.URL and never
// its secret; nothing when the job has none.
func notifyFields(n *config.Notify) []dashboard.DefField {
	if n == nil {
		return nil
	}
	out := []dashboard.DefField{{Key: "notify on", Value: strings.Join(n.On, ", ")}}
	if n.Webhook != nil {
		out = append(out, dashboard.DefField{Key: "notify webhook", Value: redact.URL(n.Webhook.URL) + " (signed)"})
	}
	if n.Command != nil {
		out = append(out, dashboard.DefField{Key: "notify command", Value: redact.Text(strings.Join(n.Command, " "))})
	}
	return out
}
