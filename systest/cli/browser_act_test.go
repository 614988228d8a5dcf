//go:build linux

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestDashboardInBrowserAct drives the job page's actions in headless
// Chromium: the login, asked for from the job page's address, lands on
// the job page; Trigger asks for a note and runs the job; Cancel on the
// running row stops the run, which shows cancelled; Retry on it runs the
// job again, and Cancel on that run's page stops it; the audit lists the
// trigger with its note, the cancels and the retry, by the browser's
// session. No page may log an error.
func TestDashboardInBrowserAct(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tasklock.yaml")
	// A tick far away: every run here is a trigger from the page.
	if err := os.WriteFile(cfg, []byte(`store: sqlite://`+filepath.Join(dir, "tasklock.db")+`
node: web-1
jobs:
  - name: long
    schedule: "0 0 1 1 *"
    kill_grace: 300ms
    command: ["sleep", "1000"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "browser-act-token"
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--token", token, "--log-format", "json")
	url := dashboardURL(t, p)

	ctx := newBrowser(t, chromium, 90*time.Second, chromedp.WindowSize(1280, 800))
	errs := consoleErrors(ctx)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nconsole errors: %q\nserve stderr:\n%s", what, err, errs(), p.Stderr())
		}
	}
	waitFor := func(js string) chromedp.Action {
		var ok bool
		return chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(30*time.Second))
	}
	// click clicks the first element matching sel with one script: the
	// live updates re-render the page, so a node found by one protocol
	// call may be gone by the next.
	click := func(sel string) chromedp.Action {
		var ok bool
		return chromedp.Poll(fmt.Sprintf(`(() => { const b = document.querySelector(%q); if (!b || b.disabled) return false; b.click(); return true })()`, sel),
			&ok, chromedp.WithPollingTimeout(30*time.Second))
	}
	const runRow = `#runs-table tr.run-row`

	run("log in, landing where the browser was going",
		chromedp.Navigate(url+"#/job/long"),
		chromedp.WaitVisible(`#login-page #login-token`, chromedp.ByQuery),
		chromedp.SendKeys(`#login-token`, token, chromedp.ByQuery),
		chromedp.Click(`#login-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#logout-button`, chromedp.ByQuery),
		waitFor(`location.hash === "#/job/long" && (document.getElementById("job-title") || {}).textContent === "long" && !!document.querySelector("#job-summary button.action-trigger")`),
	)
	run("trigger with a note",
		click(`#job-summary button.action-trigger`),
		chromedp.WaitVisible(`#note-dialog`, chromedp.ByQuery),
		chromedp.SendKeys(`#note-text`, "from the browser", chromedp.ByQuery),
		chromedp.Click(`#note-ok`, chromedp.ByQuery),
		waitFor(`!!document.querySelector('`+runRow+`[data-status="running"] button.action-cancel')`),
	)
	run("cancel the running run",
		click(runRow+`[data-status="running"] button.action-cancel`),
		chromedp.WaitVisible(`#confirm-ok`, chromedp.ByQuery),
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		waitFor(`!!document.querySelector('`+runRow+`[data-status="cancelled"] button.action-retry')`),
	)
	run("retry the cancelled run",
		click(runRow+`[data-status="cancelled"] button.action-retry`),
		chromedp.WaitVisible(`#confirm-ok`, chromedp.ByQuery),
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		waitFor(`document.querySelectorAll('`+runRow+`').length === 2 && !!document.querySelector('`+runRow+`[data-status="running"]')`),
	)
	run("cancel the retried run on its page",
		click(runRow+`[data-status="running"] a.run-link`),
		waitFor(`document.querySelector('#run-page[data-status="running"] #run-actions button.action-cancel') !== null`),
		click(`#run-actions button.action-cancel`),
		chromedp.WaitVisible(`#confirm-ok`, chromedp.ByQuery),
		chromedp.Click(`#confirm-ok`, chromedp.ByQuery),
		waitFor(`document.querySelector('#run-page[data-status="cancelled"] #run-actions button.action-retry') !== null`),
		chromedp.Navigate(url+"#/job/long"),
		waitFor(`document.querySelectorAll('`+runRow+`[data-status="cancelled"]').length === 2`),
	)
	type auditRow struct{ Action, Who, Detail string }
	var audit []auditRow
	run("audit",
		waitFor(`document.querySelectorAll("#audit-table tr.audit-row").length === 4`),
		chromedp.Evaluate(`[...document.querySelectorAll("#audit-table tr.audit-row")].map((tr) => ({
			Action: tr.dataset.action, Who: tr.querySelector("td.audit-who").textContent,
			Detail: (tr.querySelector(".audit-detail") || {}).textContent || "" }))`, &audit),
	)
	var actions []string
	for _, a := range audit {
		actions = append(actions, a.Action)
		if !strings.HasPrefix(a.Who, "api:session:") {
			t.Errorf("audit row %+v: who is not the browser's session", a)
		}
	}
	if strings.Join(actions, ",") != "cancel,retry,cancel,trigger" {
		t.Errorf("audit actions %v, want cancel, retry, cancel, trigger (newest first)", actions)
	}
	if len(audit) == 4 && !strings.HasSuffix(audit[3].Detail, ", note: from the browser") {
		t.Errorf("the trigger's audit row %+v, want its note", audit[3])
	}
	// The login page answers 401 by design, and Chromium logs that.
	login := "log: Failed to load resource: the server responded with a status of 401 (Unauthorized) " + url + "#/job/long"
	if e := slices.DeleteFunc(errs(), func(s string) bool { return s == login }); len(e) > 0 {
		t.Errorf("the pages logged errors to the console:\n%s", strings.Join(e, "\n"))
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Errorf("serve exited %d\n%s", code, p.Stderr())
	}
}
