//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/testserver"
)

// screenshotDir is where TestDashboardInBrowser saves its screenshots when
// TASKLOCK_SCREENSHOTS=1 (make screenshots): the README shows them. The
// path is relative to this package's directory, systest/cli.
const screenshotDir = "../../docs/screenshots"

// TestDashboardInBrowser drives the dashboard of a running tasklock serve
// with headless Chromium: it logs in with the token, triggers a job and
// sees its run appear in the history, pauses a job and sees its state
// change on the page and in the store, saves screenshots of the main
// pages, sees no error in the console, and logs out back to the login
// page.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "tasklock.db")
	cfg := filepath.Join(dir, "tasklock.yaml")
	if err := os.WriteFile(cfg, []byte(`store: `+store+`
node: web-1
jobs:
  - name: nightly-report
    schedule: "0 30 2 * * *"
    timezone: Europe/Berlin
    command: ["sh", "-c", "echo report for tick $TASKLOCK_TICK with fence $TASKLOCK_FENCE"]
  - name: cleanup
    schedule: "@every 2s"
    command: ["true"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "browser-test-token"
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--token", token, "--log-format", "json")
	url := dashboardURL(t, p)

	shots := t.TempDir()
	if os.Getenv("TASKLOCK_SCREENSHOTS") == "1" {
		shots = screenshotDir
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := newBrowser(t, chromium, 90*time.Second, chromedp.WindowSize(1280, 800))
	errs := consoleErrors(ctx)

	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.FullScreenshot(&buf, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), buf, 0o644)
		})
	}
	confirm := chromedp.Tasks{
		chromedp.WaitVisible(`#confirm-dialog`, chromedp.ByQuery),
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
	}
	report := `#jobs-table tr.job-row[data-job="nightly-report"]`
	// click finds and clicks sel in one script, polled until sel exists: the
	// live updates re-render the tables, so a node found by one protocol
	// call may be gone by the next.
	click := func(sel string) chromedp.Action {
		var clicked bool
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel)
		return chromedp.Poll(js, &clicked, chromedp.WithPollingTimeout(30*time.Second))
	}
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nserve stderr:\n%s", what, err, p.Stderr())
		}
	}

	// A user opens the dashboard's root, gets the login page, logs in and
	// lands on the overview, the landing page (a #/... the user had asked
	// for is kept: TestDashboardInBrowserAct).
	var landing string
	run("log in",
		chromedp.Navigate(url),
		chromedp.WaitVisible(`#login-page #login-token`, chromedp.ByQuery),
		chromedp.SendKeys(`#login-token`, token, chromedp.ByQuery),
		chromedp.Click(`#login-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#logout-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#overview-cards .card[data-figure="jobs"] .figure`, chromedp.ByQuery),
		chromedp.AttributeValue(`#nav-overview`, "class", &landing, nil, chromedp.ByQuery),
	)
	if !strings.Contains(landing, "active") {
		t.Errorf("after logging in at the root the Overview nav link's class is %q, want active (the overview is the landing page)", landing)
	}
	run("jobs page",
		chromedp.Click(`#nav-jobs`, chromedp.ByQuery),
		chromedp.WaitVisible(report, chromedp.ByQuery),
	)
	// Trigger asks for an optional note (act.js's dialog) instead of a
	// plain confirmation.
	run("trigger nightly-report",
		click(report+` button.action-trigger`),
		chromedp.WaitVisible(`#note-dialog`, chromedp.ByQuery),
		chromedp.Click(`#note-ok`, chromedp.ByQuery),
		chromedp.Navigate(url+"#/job/nightly-report"),
		// The run is recorded by serve and shown by the live update.
		chromedp.WaitVisible(`#runs-table tr.run-row[data-status="ok"]`, chromedp.ByQuery),
	)
	var output string
	run("read the run", chromedp.Text(`#runs-table tr.run-row .run-output`, &output, chromedp.ByQuery), shot("job-history.png"))
	if !strings.Contains(output, "report for tick") {
		t.Errorf("the run's output tail on the page is %q, want the command's output", output)
	}
	run("pause nightly-report",
		chromedp.Navigate(url+"#/jobs"),
		chromedp.WaitVisible(report, chromedp.ByQuery),
		click(report+` button.action-pause`),
		confirm,
		chromedp.WaitVisible(report+`[data-paused="true"] td.state-paused`, chromedp.ByQuery),
		shot("jobs.png"),
	)
	// The pause is in the store, where every node obeys it.
	code, out, errOut := tl.Run(t, nil, "jobs", "list", "--json", "--store", store)
	var list struct {
		Jobs []struct {
			Job    string `json:"job"`
			Paused bool   `json:"paused"`
		} `json:"jobs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("jobs list = %d\n%s%s", code, out, errOut)
	}
	paused := false
	for _, j := range list.Jobs {
		paused = paused || (j.Job == "nightly-report" && j.Paused)
	}
	if !paused {
		t.Errorf("nightly-report is not paused in the store: %s", out)
	}
	var kinds []string
	var leaderLine, badge string
	run("locks and nodes pages",
		chromedp.Navigate(url+"#/locks"),
		chromedp.WaitVisible(`#locks-table tr.lock-row`, chromedp.ByQuery),
		chromedp.Evaluate(`[...document.querySelectorAll("#locks-table td.lock-kind")].map((td) => td.textContent)`, &kinds),
		shot("locks.png"),
		chromedp.Navigate(url+"#/nodes"),
		// The only serve leads the fleet: its row has the leader badge.
		chromedp.WaitVisible(`#nodes-table tr.node-row[data-node="web-1"][data-leader="true"] span.leader-badge`, chromedp.ByQuery),
		chromedp.Text(`#nodes-leader`, &leaderLine, chromedp.ByQuery),
		chromedp.AttributeValue(`#nodes-table span.leader-badge`, "title", &badge, nil, chromedp.ByQuery),
		shot("nodes.png"),
	)
	if len(kinds) == 0 || !slices.Contains(kinds, "mutex") {
		t.Errorf("the locks page's Kind column shows %q, want the node locks as mutex", kinds)
	}
	if !regexp.MustCompile(`^Leader: web-1 \(term [1-9][0-9]*, lease ends in [0-9.]+ s\)`).MatchString(leaderLine) || !regexp.MustCompile(`term [1-9]`).MatchString(badge) {
		t.Errorf("the nodes page says %q, its leader badge %q; want web-1 named leader with its term", leaderLine, badge)
	}
	// The login page answers 401 by design, and Chromium logs that; the
	// pages after it log no error.
	login := "log: Failed to load resource: the server responded with a status of 401 (Unauthorized) " + url
	if e := slices.DeleteFunc(errs(), func(s string) bool { return s == login }); len(e) > 0 {
		t.Errorf("the pages logged errors to the console:\n%s", strings.Join(e, "\n"))
	}
	// Logging out ends the session: the page becomes the login page and
	// the API answers 401.
	var status int
	run("log out",
		chromedp.Click(`#logout-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#login-page #login-token`, chromedp.ByQuery),
		chromedp.Evaluate(`fetch("api/jobs").then((r) => r.status)`, &status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
			return p.WithAwaitPromise(true)
		}),
	)
	if status != 401 {
		t.Errorf("api/jobs after logout: %d, want 401", status)
	}
}

// TestDashboardInBrowserReadOnly: a dashboard started without a token says
// so, and its disabled buttons say why, instead of asking for a login.
func TestDashboardInBrowserReadOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tasklock.yaml")
	if err := os.WriteFile(cfg, []byte("store: mem://\njobs:\n  - name: hourly\n    schedule: '@hourly'\n    command: ['true']\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--log-format", "json")
	url := dashboardURL(t, p)
	ctx := newBrowser(t, chromium, 60*time.Second)
	var badge, title string
	var ok, loginHidden bool
	button := `#jobs-table tr.job-row[data-job="hourly"] button.action-trigger`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(url+"#/jobs"),
		chromedp.WaitVisible(`#read-only`, chromedp.ByQuery),
		chromedp.WaitVisible(button, chromedp.ByQuery),
		chromedp.Text(`#read-only`, &badge, chromedp.ByQuery),
		chromedp.AttributeValue(button, "title", &title, &ok, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("login-form").hidden`, &loginHidden),
	); err != nil {
		t.Fatalf("%v\nserve stderr:\n%s", err, p.Stderr())
	}
	if !strings.Contains(badge, "started without --token") {
		t.Errorf("read-only badge %q does not say it was started without --token", badge)
	}
	if !strings.Contains(title, "started without --token") {
		t.Errorf("the disabled trigger button's title is %q, want it to say started without --token", title)
	}
	if !loginHidden {
		t.Error("a dashboard without a token offers a login form")
	}
}
