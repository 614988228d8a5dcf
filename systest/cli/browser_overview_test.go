//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestDashboardInBrowserOverview: the landing page is the overview, and
// with real runs from a serve (one job that succeeds every second, one
// that fails) it draws the runs-per-minute bars with both statuses, the
// lateness lines and a p99 figure; the jobs table has a sparkline per
// job. No page logs an error to the console.
func TestDashboardInBrowserOverview(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tasklock.yaml")
	if err := os.WriteFile(cfg, []byte(`store: sqlite://`+filepath.Join(dir, "tasklock.db")+`
node: web-1
jobs:
  - name: heartbeat
    schedule: "@every 1s"
    command: ["true"]
  - name: flaky
    schedule: "@every 1s"
    command: ["false"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--log-format", "json")
	url := dashboardURL(t, p)
	ctx := newBrowser(t, chromium, 90*time.Second, chromedp.WindowSize(1280, 900))
	errs := consoleErrors(ctx)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nserve stderr:\n%s", what, err, p.Stderr())
		}
	}
	// The page is drawn once, then again by the live updates at most every
	// 10 s: wait until both statuses have a bar and p99 a figure.
	var ready bool
	run("overview with runs",
		chromedp.Navigate(url),
		chromedp.WaitVisible(`#overview-cards`, chromedp.ByQuery),
		chromedp.Poll(`!!document.querySelector('#overview-runs-chart rect.bar[data-status="failed"]') &&
			!!document.querySelector('#overview-runs-chart rect.bar[data-status="ok"]') &&
			document.getElementById("overview-p99").textContent !== "—"`,
			&ready, chromedp.WithPollingInterval(500*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second)),
	)
	var bars, lines int
	var p99, rate, nav string
	run("read the overview",
		chromedp.Evaluate(`document.querySelectorAll("#overview-runs-chart svg.chart rect.bar[data-status]").length`, &bars),
		chromedp.Evaluate(`document.querySelectorAll("#overview-lateness-chart svg.chart path.series[data-name]").length`, &lines),
		chromedp.Text(`#overview-p99`, &p99, chromedp.ByQuery),
		chromedp.Text(`#overview-failure-rate`, &rate, chromedp.ByQuery),
		chromedp.AttributeValue(`#nav-overview`, "class", &nav, nil, chromedp.ByQuery),
	)
	if bars == 0 || lines != 2 {
		t.Errorf("the overview's charts have %d bars and %d lines, want bars and 2 lines (p50, p99)", bars, lines)
	}
	if !regexp.MustCompile(`^[0-9.]+ (ms|s)$`).MatchString(p99) {
		t.Errorf("p99 shows %q, want a duration", p99)
	}
	if !strings.HasSuffix(rate, "%") {
		t.Errorf("the failure rate shows %q, want a percentage", rate)
	}
	if !strings.Contains(nav, "active") {
		t.Errorf("the Overview nav link's class is %q on the landing page, want active", nav)
	}
	if os.Getenv("TASKLOCK_SCREENSHOTS") == "1" {
		var buf []byte
		run("screenshot", chromedp.FullScreenshot(&buf, 100))
		if err := os.WriteFile(filepath.Join(screenshotDir, "overview.png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var sparks int
	run("jobs page sparklines",
		chromedp.Navigate(url+"#/jobs"),
		chromedp.WaitVisible(`#jobs-table tr.job-row[data-job="flaky"] td.job-spark svg.sparkline rect.spark[data-status="failed"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#jobs-table td.job-spark svg.sparkline").length`, &sparks),
	)
	if sparks != 2 {
		t.Errorf("%d sparklines in the jobs table, want one per job (2)", sparks)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("the pages logged errors to the console:\n%s", strings.Join(e, "\n"))
	}
}
