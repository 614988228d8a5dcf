//go:build linux

package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/testserver"
)

// consoleErrors collects what the page reports as errors: uncaught
// exceptions (unhandled promise rejections too), console.error calls, and
// the browser's own error entries (a failed request, a CSP refusal). The
// returned function gives those seen so far.
func consoleErrors(ctx context.Context) func() []string {
	var mu sync.Mutex
	var errs []string
	chromedp.ListenTarget(ctx, func(ev any) {
		var s string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			s = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				s += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.APITypeError && ev.Type != runtime.APITypeAssert {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			s = "console." + string(ev.Type) + ": " + strings.Join(parts, " ")
		case *log.EventEntryAdded:
			if ev.Entry.Level != log.LevelError {
				return
			}
			s = "log: " + ev.Entry.Text + " " + ev.Entry.URL
		default:
			return
		}
		mu.Lock()
		errs = append(errs, s)
		mu.Unlock()
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// TestDashboardInBrowserShardsDepsAudit drives the job page's newer parts
// in headless Chromium: a sharded job's run history shows each row's shard
// and the tick's status over all shards; a job with parents and children
// shows both, each with its last status and a link to its page; and the
// audit section lists a pause made through the API, who did it and when.
// No page may log an error to the console.
func TestDashboardInBrowserShardsDepsAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "tasklock.db")
	cfg := filepath.Join(dir, "tasklock.yaml")
	// Ticks far away: every run here is a trigger through the API, which
	// does not wait for parents. Shard 1 of sharded-sync fails, so the
	// tick fails while shards 0 and 2 are ok.
	if err := os.WriteFile(cfg, []byte(`store: `+store+`
node: web-1
jobs:
  - name: sharded-sync
    schedule: "@daily"
    shards: 3
    command: ["sh", "-c", "test $TASKLOCK_SHARD != 1"]
  - name: extract
    schedule: "@daily"
    command: ["true"]
  - name: load
    schedule: "@daily"
    after: [extract]
    command: ["true"]
  - name: publish
    schedule: "@daily"
    after: [load]
    command: ["false"]
  - name: report
    schedule: "@daily"
    after: [sharded-sync]
    command: ["true"]
  - name: solo
    schedule: "@daily"
    command: ["true"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "browser-test-token"
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--token", token, "--log-format", "json")
	url := dashboardURL(t, p)

	// apiPost calls the JSON API as a script would: with the token, no
	// browser session.
	apiPost := func(path string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", path, res.Status)
		}
	}
	for _, j := range []string{"sharded-sync", "extract", "load", "publish"} {
		apiPost("api/jobs/" + j + "/trigger")
	}

	ctx := newBrowser(t, chromium, 90*time.Second, chromedp.WindowSize(1280, 800))
	errs := consoleErrors(ctx)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nconsole errors: %q\nserve stderr:\n%s", what, err, errs(), p.Stderr())
		}
	}
	// onPage is a script true when the page shown is job name's.
	onPage := func(name string) string {
		return fmt.Sprintf(`((document.getElementById("job-title") || {}).textContent === %q)`, name)
	}
	// eval reads a value with one script: the live updates re-render the
	// page, so nodes found by one protocol call may be gone by the next.
	eval := func(js string, v any) chromedp.Action { return chromedp.Evaluate(js, v) }
	// waitFor polls js until it is true, the page being re-rendered by the
	// live updates as the runs are recorded.
	waitFor := func(js string) chromedp.Action {
		var ok bool
		return chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(30*time.Second))
	}

	// The login lands on the overview (the landing page); the jobs are a
	// click away.
	run("log in",
		chromedp.Navigate(url),
		chromedp.WaitVisible(`#login-page #login-token`, chromedp.ByQuery),
		chromedp.SendKeys(`#login-token`, token, chromedp.ByQuery),
		chromedp.Click(`#login-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#logout-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#overview-cards`, chromedp.ByQuery),
		chromedp.Click(`#nav-jobs`, chromedp.ByQuery),
		chromedp.WaitVisible(`#jobs-table tr.job-row[data-job="sharded-sync"]`, chromedp.ByQuery),
	)

	// The sharded job: one row per shard, each with its shard of 3 and the
	// tick's status, failed since shard 1 failed.
	type runCells struct {
		Shard, Status, TickStatus, DataShard string
	}
	var rows []runCells
	run("sharded history",
		chromedp.Navigate(url+"#/job/sharded-sync"),
		waitFor(onPage("sharded-sync")+` && document.querySelectorAll("#runs-table tr.run-row:not([data-status=running])").length === 3`),
		eval(`[...document.querySelectorAll("#runs-table tr.run-row")].map((tr) => ({
			Shard: tr.querySelector("td.run-shard").textContent,
			Status: tr.querySelector("td.run-status").textContent,
			TickStatus: tr.querySelector("td.run-tick-status").textContent,
			DataShard: tr.dataset.shard,
		})).sort((a, b) => a.Shard < b.Shard ? -1 : 1)`, &rows),
	)
	want := []runCells{
		{Shard: "0/3", Status: "ok", TickStatus: "failed", DataShard: "0"},
		{Shard: "1/3", Status: "failed", TickStatus: "failed", DataShard: "1"},
		{Shard: "2/3", Status: "ok", TickStatus: "failed", DataShard: "2"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("sharded-sync's history rows (shard, status, tick status, data-shard):\n got %v\nwant %v", rows, want)
	}
	var headers []string
	run("history headers", eval(`[...document.querySelectorAll("#runs-table thead th")].map((th) => th.textContent)`, &headers))
	if len(headers) < 4 || headers[1] != "Shard" || headers[3] != "Tick status" {
		t.Errorf("the history's headers are %q, want Shard second and Tick status fourth", headers)
	}
	// An unsharded job's rows say so with a dash, not 0/1.
	var plain []string
	run("unsharded history",
		chromedp.Navigate(url+"#/job/extract"),
		waitFor(onPage("extract")+` && !!document.querySelector("#runs-table tr.run-row[data-status=ok]")`),
		eval(`[...document.querySelectorAll("#runs-table tr.run-row")].map((tr) => tr.querySelector("td.run-shard").textContent + " " + tr.querySelector("td.run-tick-status").textContent)`, &plain),
	)
	if len(plain) != 1 || plain[0] != "— —" {
		t.Errorf("extract's history shows shard and tick status %q, want dashes", plain)
	}
	// The jobs page names the sharded job's last tick by its status over
	// all shards. Its first render may come from the recent runs read
	// before the last shard ended (they serve a second); the live update
	// for that shard brings the page up to date.
	var last string
	run("jobs page last run",
		chromedp.Navigate(url+"#/jobs"),
		waitFor(`(document.querySelector('#jobs-table tr.job-row[data-job="sharded-sync"] td.job-last .status') || {}).textContent === "failed"`),
		eval(`document.querySelector('#jobs-table tr.job-row[data-job="sharded-sync"] td.job-last').textContent`, &last),
	)
	if !strings.HasPrefix(last, "failed ") || !strings.Contains(last, "3 shards") {
		t.Errorf("the jobs page's last run of sharded-sync is %q, want failed over 3 shards", last)
	}

	// The DAG: load waits for extract (ok) and publish waits for load
	// (failed); each node links to its job's page.
	type dagNode struct {
		Job, Status, Badge, Href string
	}
	var parents, children []dagNode
	var self dagNode
	const dagJS = `[...document.querySelectorAll("#%s li.dag-node")].map((li) => ({
		Job: li.dataset.job, Status: li.dataset.status,
		Badge: (li.querySelector(".status") || {}).textContent || "",
		Href: (li.querySelector("a") || {}).getAttribute ? li.querySelector("a").getAttribute("href") : "",
	}))`
	run("dag of load",
		chromedp.Navigate(url+"#/job/load"),
		waitFor(onPage("load")+` && !!document.querySelector('#dag-parents li.dag-node[data-job="extract"][data-status="ok"]') &&
			!!document.querySelector('#dag-children li.dag-node[data-job="publish"][data-status="failed"]') &&
			!!document.querySelector('#job-deps li.dag-self[data-status="ok"]')`),
		eval(fmt.Sprintf(dagJS, "dag-parents"), &parents),
		eval(fmt.Sprintf(dagJS, "dag-children"), &children),
		eval(`(() => { const li = document.querySelector("#job-deps li.dag-self"); return { Job: li.dataset.job, Status: li.dataset.status, Badge: li.querySelector(".status").textContent, Href: "" } })()`, &self),
	)
	if fmt.Sprint(parents) != fmt.Sprint([]dagNode{{"extract", "ok", "ok", "#/job/extract"}}) {
		t.Errorf("load's parents (Waits for): %v, want extract ok linking to #/job/extract", parents)
	}
	if fmt.Sprint(children) != fmt.Sprint([]dagNode{{"publish", "failed", "failed", "#/job/publish"}}) {
		t.Errorf("load's children (Then): %v, want publish failed linking to #/job/publish", children)
	}
	if self.Job != "load" || self.Badge != "ok" {
		t.Errorf("the DAG's middle is %v, want load with its last status ok", self)
	}
	var titles []string
	run("dag titles", eval(`[...document.querySelectorAll("#job-deps h2")].map((h) => h.textContent)`, &titles))
	if strings.Join(titles, ",") != "Waits for,This job,Then" {
		t.Errorf("the DAG's columns are %q, want Waits for, This job, Then", titles)
	}
	// The links work: the child's link opens its page, whose parent is
	// load; its own children are none.
	var title string
	var none []string
	run("follow the child's link",
		chromedp.Click(`#dag-children li.dag-node[data-job="publish"] a`, chromedp.ByQuery),
		waitFor(onPage("publish")+` &&
			!!document.querySelector('#dag-parents li.dag-node[data-job="load"][data-status="ok"]')`),
		chromedp.Text(`#job-title`, &title, chromedp.ByQuery),
		eval(`[...document.querySelectorAll("#dag-children li")].map((li) => li.textContent)`, &none),
	)
	if title != "publish" || strings.Join(none, ",") != "none" {
		t.Errorf("after the link: page %q with children %q, want publish with none", title, none)
	}
	run("follow the parent's link",
		chromedp.Click(`#dag-parents li.dag-node[data-job="load"] a`, chromedp.ByQuery),
		waitFor(`location.hash === "#/job/load" && `+onPage("load")+` && !!document.querySelector('#dag-parents li.dag-node[data-job="extract"]')`),
	)
	// A sharded parent's status is its tick's, over all its shards: failed,
	// though two of its three shard-runs are ok. A job never run says so.
	run("dag of report",
		chromedp.Navigate(url+"#/job/report"),
		waitFor(onPage("report")+` && !!document.querySelector('#dag-parents li.dag-node[data-job="sharded-sync"][data-status="failed"] .status-failed') &&
			!!document.querySelector('#job-deps li.dag-self[data-status="none"]') && document.querySelector("#dag-children li").textContent === "none"`),
	)
	// A job with no dependencies has no DAG box.
	var hasDeps bool
	var stray []string
	run("no dag without dependencies",
		chromedp.Navigate(url+"#/job/solo"),
		waitFor(onPage("solo")+` && !!document.querySelector("#job-audit")`),
		eval(`!!document.getElementById("job-deps")`, &hasDeps),
		eval(`[...document.getElementById("main").childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent)`, &stray),
	)
	if hasDeps {
		t.Error("solo has neither parents nor children, yet its page shows a DAG")
	}
	if len(stray) > 0 {
		t.Errorf("the page has stray text between its parts: %q", stray)
	}

	// The audit: a pause through the API is listed with who, the action and
	// when, newest first, above the triggers.
	before := time.Now().UTC().Add(-time.Minute)
	apiPost("api/jobs/load/pause")
	type auditRow struct {
		When, Rel, Who, Action string
	}
	var audit []auditRow
	run("audit of load",
		chromedp.Navigate(url+"#/job/load"),
		waitFor(onPage("load")+` && !!document.querySelector('#job-audit #audit-table tr.audit-row[data-action="pause"]')`),
		eval(`[...document.querySelectorAll("#job-audit #audit-table tr.audit-row")].map((tr) => ({
			When: tr.cells[0].querySelector("time.t").dateTime, Rel: tr.cells[0].textContent, Who: tr.querySelector("td.audit-who").textContent, Action: tr.querySelector("td.audit-action").textContent,
		}))`, &audit),
	)
	if len(audit) != 2 || audit[0].Action != "pause" || audit[0].Who != "api:token" || audit[1].Action != "trigger" {
		t.Fatalf("load's audit section: %v, want the pause by api:token above the trigger", audit)
	}
	when, err := time.Parse(time.RFC3339Nano, audit[0].When)
	if err != nil || when.Before(before) || when.After(time.Now().UTC().Add(time.Minute)) {
		t.Errorf("the pause's time on the page is %q (%v), want about now", audit[0].When, err)
	}
	if !regexp.MustCompile(`^(now|[0-9]+ s ago|1 min ago)$`).MatchString(audit[0].Rel) {
		t.Errorf("the pause's time reads %q, want how long ago", audit[0].Rel)
	}
	var auditHead []string
	run("audit headers", eval(`[...document.querySelectorAll("#job-audit h2, #audit-table th")].map((e) => e.textContent)`, &auditHead))
	if strings.Join(auditHead, ",") != "Audit,When,Who,Action,What changed" {
		t.Errorf("the audit section's headings are %q", auditHead)
	}
	// A job without entries says so.
	var empty string
	run("empty audit",
		chromedp.Navigate(url+"#/jobs"),
		chromedp.WaitVisible(`#jobs-table`, chromedp.ByQuery),
		chromedp.Navigate(url+"#/job/nonesuch"),
		waitFor(onPage("nonesuch")+` && !!document.querySelector("#job-audit p")`),
		chromedp.Text(`#job-audit p`, &empty, chromedp.ByQuery),
	)
	if empty != "No changes recorded for this job." {
		t.Errorf("an unknown job's audit section says %q", empty)
	}
	// The login page answers 401 by design, and Chromium logs that.
	login := "log: Failed to load resource: the server responded with a status of 401 (Unauthorized) " + url
	if e := slices.DeleteFunc(errs(), func(s string) bool { return s == login }); len(e) > 0 {
		t.Errorf("the pages logged errors to the console:\n%s", strings.Join(e, "\n"))
	}
}
