//go:build unix

package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

const testSecret = "hook-s3cret"

// receiver is a webhook endpoint that checks each request's signature and
// keeps what it got; answer gives the status of the n-th request (from 1).
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	answer func(n int) int
	mu     sync.Mutex
	got    []received
}

type received struct {
	body    notification
	headers http.Header
	code    int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	r := &receiver{t: t, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	ts := req.Header.Get("X-Tasklock-Timestamp")
	m := hmac.New(sha256.New, []byte(testSecret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if got := req.Header.Get("X-Tasklock-Signature"); !hmac.Equal([]byte(got), []byte(want)) {
		r.t.Errorf("signature %q, want %q (timestamp %q)", got, want, ts)
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > time.Minute {
		r.t.Errorf("timestamp %q is not the time of sending", ts)
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("%s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
	}
	var n notification
	if err := json.Unmarshal(body, &n); err != nil {
		r.t.Errorf("body %s: %v", body, err)
	}
	r.mu.Lock()
	code := r.answer(len(r.got) + 1)
	r.got = append(r.got, received{n, req.Header.Clone(), code})
	r.mu.Unlock()
	w.WriteHeader(code)
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func always(code int) func(int) int { return func(int) int { return code } }

// webhookNotify is a notify: with the receiver's webhook, fast retries.
func webhookNotify(url string, on ...string) *config.Notify {
	return config.Merge(&config.Notify{
		On: on, Webhook: &config.Webhook{URL: url, Secret: testSecret, Timeout: 5 * time.Second},
		Attempts: 3, Backoff: 10 * time.Millisecond, MaxTime: time.Minute,
	}, nil)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tasklock_notifications_total"}, []string{"job", "event", "result"})
}

// deliveries reads the delivery log of job from the audit list, oldest
// first.
func deliveries(t *testing.T, cat ledger.Catalog, job string) []apijson.Delivery {
	t.Helper()
	es, err := cat.Audit(context.Background(), ledger.AuditQuery{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	var out []apijson.Delivery
	for i := len(es) - 1; i >= 0; i-- {
		if d, ok := apijson.FromDelivery(es[i]); ok {
			out = append(out, d)
		}
	}
	return out
}

// A job failing three ticks in a row on a fleet of three nodes sharing one
// store notifies once, then once when it recovers — although every node
// decides every outcome (each node's events go to all three notifiers):
// the notification is claimed in the ledger.
func TestNotifyOncePerTransitionAcrossFleet(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			url := "sqlite://" + filepath.Join(t.TempDir(), "notify.db")
			if store == "redis" {
				url, _ = redisFor(t)
			}
			testNotifyFleet(t, url)
		})
	}
}

func testNotifyFleet(t *testing.T, url string) {
	rcv := newReceiver(t, always(http.StatusOK))
	cfg := webhookNotify(rcv.srv.URL + "/hook")
	sent := newCounter()
	var failing atomic.Bool
	failing.Store(true)
	job := "flaky"
	var notifiers []*notifier
	var scheds []*schedule.Scheduler
	var cat ledger.Catalog
	var l ledger.Ledger
	for i := range 3 {
		node := "n" + strconv.Itoa(i+1)
		st, closeStore, err := storeurl.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = closeStore() })
		l, cat = st.(ledger.Ledger), st.(ledger.Catalog)
		notifiers = append(notifiers, newNotifier(&notifier{
			ledger: l, catalog: cat, node: node, log: quietLog(), sent: sent,
			config: func(j string) *config.Notify {
				if j == job {
					return cfg
				}
				return nil
			},
		}))
		lk, err := tasklock.New(st, &tasklock.Config{Owner: node})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lk.Close() })
		s, err := schedule.New(lk, l, &schedule.Config{
			Node: node, PollInterval: 100 * time.Millisecond,
			OnEvent: func(e schedule.Event) {
				for _, n := range notifiers {
					n.event(e)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(schedule.Job{Name: job, Schedule: "@every 1s", Misfire: schedule.MisfireSkip, Handler: func(ctx context.Context, r schedule.Run) error {
			if failing.Load() {
				return errors.New("upstream down")
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds { // once every notifier exists
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	}
	final := func(st ledger.RunStatus) int {
		rs, err := l.Runs(context.Background(), ledger.RunQuery{Job: job, Status: st})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	clitest.WaitFor(t, 60*time.Second, func() bool { return final(ledger.RunFailed) >= 3 }, "three failed ticks")
	failing.Store(false)
	clitest.WaitFor(t, 60*time.Second, func() bool { return final(ledger.RunOK) >= 3 }, "three ok ticks after them")
	for _, n := range notifiers {
		n.stopNotifier(30 * time.Second) // decides every queued outcome and waits for the deliveries
	}
	got := rcv.received()
	var events []string
	for _, r := range got {
		events = append(events, r.body.Event)
	}
	if strings.Join(events, " ") != "failure recovery" {
		t.Fatalf("notifications %q, want one failure and one recovery", events)
	}
	fail, rec := got[0].body, got[1].body
	if fail.Job != job || fail.Status != "failed" || fail.Error != "upstream down" || fail.Attempt != 1 || fail.PreviousStatus != "" && fail.PreviousStatus != "ok" {
		t.Errorf("failure notification %+v", fail)
	}
	if rec.Status != "ok" || rec.PreviousStatus != "failed" || rec.PreviousTick == nil || !rec.Tick.After(*rec.PreviousTick) || !rec.Tick.After(fail.Tick) {
		t.Errorf("recovery notification %+v after %+v", rec, fail)
	}
	if fail.ID == rec.ID || got[0].headers.Get("X-Tasklock-Delivery") != fail.ID || got[0].headers.Get("X-Tasklock-Event") != "failure" {
		t.Errorf("ids %q %q, headers %v", fail.ID, rec.ID, got[0].headers)
	}
	log := deliveries(t, cat, job)
	if len(log) != 2 || log[0].Event != "failure" || log[0].Result != "delivered" || log[0].Code != 200 || log[1].Event != "recovery" ||
		log[0].ID != fail.ID || log[0].Attempt != 1 || !strings.HasPrefix(log[0].Target, "webhook http://127.0.0.1:") {
		t.Errorf("delivery log %+v", log)
	}
	for _, ev := range []string{"failure", "recovery"} {
		if n := testutil.ToFloat64(sent.WithLabelValues(job, ev, "delivered")); n != 1 {
			t.Errorf("tasklock_notifications_total{event=%q,result=delivered} = %v, want 1", ev, n)
		}
	}
}

// recordRuns writes history for the unit tests below: one record per
// status, a second apart from t0, attempt 1.
func recordRuns(t *testing.T, l ledger.Ledger, job string, t0 time.Time, sts ...ledger.RunStatus) []ledger.RunRecord {
	t.Helper()
	var rs []ledger.RunRecord
	for i, st := range sts {
		tick := t0.Add(time.Duration(i) * time.Second)
		rs = append(rs, ledger.RunRecord{Job: job, Tick: tick, Attempt: 1, Node: "n1", Start: tick, End: tick, Status: st, Error: "err " + string(st), Output: strings.Repeat("x", 10000)})
	}
	if err := l.RecordRuns(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

func endedEvent(r ledger.RunRecord) schedule.Event {
	return schedule.Event{Type: schedule.EventTickEnded, Job: r.Job, Tick: r.Tick, Attempt: r.Attempt, Status: r.Status, Error: r.Error, Node: r.Node}
}

// A receiver that answers 500 and then 200 gets the notification twice,
// with the same delivery id, and the log shows both attempts; a 400 is not
// retried.
func TestNotifyWebhookRetries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		answer  func(int) int
		results string
		codes   string
	}{
		{"500 then 200", func(n int) int { return map[bool]int{true: 500, false: 200}[n == 1] }, "retrying delivered", "500 200"},
		{"429 twice then 502", func(n int) int { return map[bool]int{true: 429, false: 502}[n < 3] }, "retrying retrying failed", "429 429 502"},
		{"400", always(400), "failed", "400"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New(nil)
			rcv := newReceiver(t, tt.answer)
			sent := newCounter()
			n := newNotifier(&notifier{ledger: st, catalog: st, node: "n1", log: quietLog(), sent: sent,
				config: func(string) *config.Notify { return webhookNotify(rcv.srv.URL) }})
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			rs := recordRuns(t, st, "j", t0, ledger.RunOK, ledger.RunFailed)
			n.event(endedEvent(rs[1]))
			n.stopNotifier(time.Minute)
			got := rcv.received()
			var codes []string
			for i, r := range got {
				codes = append(codes, strconv.Itoa(r.code))
				if r.body.ID != got[0].body.ID || r.headers.Get("X-Tasklock-Attempt") != strconv.Itoa(i+1) {
					t.Errorf("attempt %d: id %s, header %q", i+1, r.body.ID, r.headers.Get("X-Tasklock-Attempt"))
				}
			}
			if strings.Join(codes, " ") != tt.codes {
				t.Fatalf("receiver answered %v, want %s", codes, tt.codes)
			}
			b := got[0].body
			if b.Event != "failure" || b.PreviousStatus != "ok" || len(b.Output) != maxNotifyOutput || b.NotifiedBy != "n1" {
				t.Errorf("body %+v (output %d bytes)", b, len(b.Output))
			}
			log := deliveries(t, st, "j")
			var results []string
			for i, d := range log {
				results = append(results, d.Result)
				if d.Attempt != i+1 || d.Code != got[i].code || (d.Result == "retrying") != (d.NextRetry != nil) || d.Node != "n1" {
					t.Errorf("log entry %d: %+v", i, d)
				}
			}
			if strings.Join(results, " ") != tt.results {
				t.Errorf("delivery log results %v, want %s", results, tt.results)
			}
			final := log[len(log)-1].Result
			if n := testutil.ToFloat64(sent.WithLabelValues("j", "failure", final)); n != 1 {
				t.Errorf("tasklock_notifications_total{result=%s} = %v", final, n)
			}
		})
	}
}

// Transitions: only a change of outcome notifies; recovery only after an
// event notify.on names; an outcome a later attempt replaced does not.
func TestNotifyTransitions(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		on      []string
		history []ledger.RunStatus // the last one is the outcome decided
		want    string             // the event sent, "" for none
	}{
		{"first failure", nil, []ledger.RunStatus{ledger.RunFailed}, "failure"},
		{"failure after ok", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunFailed}, "failure"},
		{"failure again", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunFailed, ledger.RunFailed}, ""},
		{"failure after skips", nil, []ledger.RunStatus{ledger.RunFailed, ledger.RunSkipped, ledger.RunSkipped, ledger.RunFailed}, ""},
		{"timeout after failure", nil, []ledger.RunStatus{ledger.RunFailed, ledger.RunTimeout}, "timeout"},
		{"lost", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunLost}, "lost"},
		{"missed", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunMissed}, "missed"},
		{"interrupted", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunInterrupted}, "interrupted"},
		{"recovery", nil, []ledger.RunStatus{ledger.RunTimeout, ledger.RunSkipped, ledger.RunOK}, "recovery"},
		{"ok after ok", nil, []ledger.RunStatus{ledger.RunOK, ledger.RunOK}, ""},
		{"first ok", nil, []ledger.RunStatus{ledger.RunOK}, ""},
		{"failure not asked for", []string{"timeout", "recovery"}, []ledger.RunStatus{ledger.RunOK, ledger.RunFailed}, ""},
		{"recovery from an event not asked for", []string{"timeout", "recovery"}, []ledger.RunStatus{ledger.RunFailed, ledger.RunOK}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New(nil)
			rcv := newReceiver(t, always(200))
			cfg := webhookNotify(rcv.srv.URL, tt.on...)
			n := newNotifier(&notifier{ledger: st, catalog: st, node: "n1", log: quietLog(), config: func(string) *config.Notify { return cfg }})
			rs := recordRuns(t, st, "j", t0, tt.history...)
			last := rs[len(rs)-1]
			e := endedEvent(last)
			if last.Status == ledger.RunMissed {
				e.Type = schedule.EventMissed
			}
			n.event(e)
			n.stopNotifier(time.Minute)
			var got []string
			for _, r := range rcv.received() {
				got = append(got, r.body.Event)
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("sent %q, want %q", got, tt.want)
			}
		})
	}
	// A record replaced since the event (a retry followed) is not judged.
	st := memstore.New(nil)
	rcv := newReceiver(t, always(200))
	n := newNotifier(&notifier{ledger: st, catalog: st, node: "n1", log: quietLog(), config: func(string) *config.Notify { return webhookNotify(rcv.srv.URL) }})
	rs := recordRuns(t, st, "j", t0, ledger.RunOK, ledger.RunFailed)
	retry := rs[1]
	retry.Attempt, retry.Status = 2, ledger.RunRunning
	if err := st.RecordRuns(context.Background(), []ledger.RunRecord{retry}); err != nil {
		t.Fatal(err)
	}
	n.event(endedEvent(rs[1]))
	n.stopNotifier(time.Minute)
	if got := rcv.received(); len(got) != 0 {
		t.Fatalf("sent %+v for an attempt a retry followed", got)
	}
}

// End to end through tasklock serve: a failing job's notification reaches
// the signed webhook (its secret from secret_env) and the command hook, as
// JSON on stdin with TASKLOCK_* variables but none of serve's own
// (TASKLOCK_TOKEN); once, however many ticks fail; and both deliveries are
// in the audit list, which jobs notifications shows.
func TestServeNotify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "stdin.json")
	url := "sqlite://" + filepath.Join(dir, "n.db")
	rcv := newReceiver(t, always(http.StatusNoContent))
	cfg := writeConfig(t, dir, "store: "+url+"\nnode: n1\n"+`notify:
  webhook: {url: "`+rcv.srv.URL+`/hook", secret_env: HOOK_SECRET}
  command: ["sh", "-c", "cat > \"$NOTIFY_OUT.tmp\"; env > \"$NOTIFY_OUT.env.$TASKLOCK_ATTEMPT\"; echo x >> \"$NOTIFY_OUT.count\"; mv \"$NOTIFY_OUT.tmp\" \"$NOTIFY_OUT\""]
jobs:
  - name: broken
    schedule: "@every 1s"
    command: ["sh", "-c", "echo going down; exit 3"]
`)
	p := tl.Start(t, []string{"NOTIFY_OUT=" + out, "TASKLOCK_TOKEN=dashboard-token", "HOOK_SECRET=" + testSecret}, "serve", "--config", cfg, "--http", "", "--grace", "5s")
	clitest.WaitFor(t, 60*time.Second, func() bool {
		if _, err := os.Stat(out); err != nil {
			return false
		}
		failed := 0
		for _, r := range historyJSON(t, url, "broken") {
			if r.Status == "failed" {
				failed++
			}
		}
		return failed >= 3
	}, "the notification and three failed ticks")
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, p.Stderr())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var msg notification
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatalf("stdin %s: %v", b, err)
	}
	if msg.Event != "failure" || msg.Job != "broken" || msg.Status != "failed" || msg.Error != "command exited with status 3" ||
		msg.Output != "going down\n" || msg.Node != "n1" || msg.NotifiedBy != "n1" || msg.ID == "" {
		t.Errorf("stdin %+v", msg)
	}
	if got := rcv.received(); len(got) != 1 || got[0].body.ID != msg.ID || got[0].body.Event != "failure" {
		t.Errorf("the webhook got %+v, want the failure once (signed: the receiver checks)", got)
	}
	if strings.Contains(p.Stderr(), testSecret) || strings.Contains(p.Stdout(), testSecret) {
		t.Error("serve printed the webhook's secret")
	}
	if n, _ := os.ReadFile(out + ".count"); string(n) != "x\n" {
		t.Errorf("the command ran %d times, want once", strings.Count(string(n), "x"))
	}
	env, _ := os.ReadFile(out + ".env.1")
	for _, want := range []string{"TASKLOCK_EVENT=failure", "TASKLOCK_JOB=broken", "TASKLOCK_STATUS=failed", "TASKLOCK_NODE=n1",
		"TASKLOCK_TICK=" + msg.Tick.Format(time.RFC3339), "TASKLOCK_DELIVERY=" + msg.ID, "TASKLOCK_ATTEMPT=1"} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	if strings.Contains(string(env), "dashboard-token") {
		t.Errorf("serve's TASKLOCK_TOKEN reached the command:\n%s", env)
	}
	st, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if log := deliveries(t, st.(ledger.Catalog), "broken"); len(log) != 2 || log[0].Result != "delivered" || log[1].Result != "delivered" || log[0].Node != "n1" {
		t.Errorf("delivery log %+v", log)
	}
	// The job page's definition names the targets, never the secret.
	def := notifyFields(config.Merge(&config.Notify{Webhook: &config.Webhook{URL: "https://u:pw@h/x?token=t", Secret: testSecret}}, nil))
	if len(def) != 2 || def[0].Value != strings.Join(config.NotifyEvents, ", ") || strings.Contains(def[1].Value, "pw") || strings.Contains(def[1].Value, testSecret) {
		t.Errorf("definition %+v", def)
	}
	// The same log from the CLI.
	code, stdout, stderr := tl.Run(t, nil, "jobs", "notifications", "--store", url, "--job", "broken")
	if code != 0 || !strings.Contains(stdout, "failure") || !strings.Contains(stdout, "delivered") || !strings.Contains(stdout, "command sh") || !strings.Contains(stdout, "webhook http://127.0.0.1:") {
		t.Errorf("jobs notifications: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A webhook that cannot be reached is retried, and its errors hide the
// URL's password and the secret.
func TestNotifyErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	st := memstore.New(nil)
	cfg := webhookNotify("http://user:hunter2@127.0.0.1:1/hook?token=" + testSecret)
	cfg.Attempts = 2
	n := newNotifier(&notifier{ledger: st, catalog: st, node: "n1", log: quietLog(), config: func(string) *config.Notify { return cfg }})
	rs := recordRuns(t, st, "j", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), ledger.RunFailed)
	n.event(endedEvent(rs[0]))
	n.stopNotifier(time.Minute)
	log := deliveries(t, st, "j")
	if len(log) != 2 || log[0].Result != "retrying" || log[1].Result != "failed" || log[0].Error == "" {
		t.Fatalf("delivery log %+v", log)
	}
	for _, d := range log {
		b, _ := json.Marshal(d)
		if strings.Contains(string(b), "hunter2") || strings.Contains(string(b), testSecret) {
			t.Errorf("a secret in the delivery log: %s", b)
		}
	}
}
