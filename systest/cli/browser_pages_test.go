//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestDashboardInBrowserJobAndRunPages drives the job and run pages in
// headless Chromium, whose zone is America/New_York: a job's page shows
// its definition (no secret of an http job) and its next 5 ticks in the
// viewer's zone and in UTC; a run that printed 1 MiB has a page with the
// head and the tail of its output (the default output_max, 64 KiB) and
// the cut marker between, its attempts and its lock; times read relative
// ("12 s ago"), keep counting, and have the absolute time as their title;
// the header's zone switch turns every absolute time on the page into UTC
// and back, and is remembered across a reload. With TASKLOCK_SCREENSHOTS=1
// The job page draws the duration and lateness of its runs as two line
// charts, and a job's page lists the delivery of its notification. With
// TASKLOCK_SCREENSHOTS=1 it saves job.png, run.png and notifications.png
// for the README.
func TestDashboardInBrowserJobAndRunPages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "tasklock.db")
	cfg := filepath.Join(dir, "tasklock.yaml")
	const pw, hookToken, bearer = "hunter2-pw", "tok-abc-123456", "zzz-bearer-987"
	if err := os.WriteFile(cfg, []byte(`store: `+store+`
node: web-1
labels: [zone=eu]
pools: {reports: 2}
jobs:
  - name: nightly-report
    schedule: "0 30 2 * * *"
    timezone: Europe/Berlin
    command: ["sh", "-c", "echo report for tick $TASKLOCK_TICK"]
    timeout: 10m
    retries: {max: 2, backoff: 10s}
    pool: reports
    nodes: [zone=eu]
  - name: big-output
    schedule: "@daily"
    command: ["sh", "-c", "echo FIRST-LINE; yes 'a middle line of the output' | head -c 1048576; echo; echo LAST-LINE"]
  - name: flaky
    schedule: "@yearly"
    command: ["false"]
    notify: {command: ["sh", "-c", "cat >/dev/null"]}
  - name: webhook
    schedule: "@yearly"
    http:
      method: POST
      url: "https://user:`+pw+`@hooks.example/run?token=`+hookToken+`&x=1"
      headers: {Authorization: "Bearer `+bearer+`"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "browser-test-token"
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--token", token, "--public-read", "--log-format", "json")
	url := dashboardURL(t, p)
	// Runs to show: the 1 MiB one, and two of nightly-report for its
	// history and charts.
	for _, job := range []string{"big-output", "nightly-report", "nightly-report", "flaky"} {
		req, err := http.NewRequest(http.MethodPost, url+"api/jobs/"+job+"/trigger", nil)
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
			t.Fatalf("trigger %s: %s", job, res.Status)
		}
	}

	shots := t.TempDir()
	if os.Getenv("TASKLOCK_SCREENSHOTS") == "1" {
		shots = screenshotDir
	}
	ctx := newBrowser(t, chromium, 90*time.Second, chromedp.WindowSize(1280, 900), chromedp.Env("TZ=America/New_York", "LANG=en_US.UTF-8"))
	errs := consoleErrors(ctx)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nconsole errors: %q\nserve stderr:\n%s", what, err, errs(), p.Stderr())
		}
	}
	eval := func(js string, v any) chromedp.Action { return chromedp.Evaluate(js, v) }
	waitFor := func(js string) chromedp.Action {
		var ok bool
		return chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(45*time.Second))
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.FullScreenshot(&buf, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), buf, 0o644)
		})
	}
	// Start in the viewer's zone, whatever an earlier run remembered.
	run("open", chromedp.Navigate(url+"#/jobs"), waitFor(`!!document.querySelector("#jobs-table tr.job-row")`),
		eval(`localStorage.removeItem("tasklock.zone"); true`, nil), chromedp.Reload(),
		waitFor(`document.getElementById("zone-switch").dataset.zone === "local"`))

	// The run page of the 1 MiB run: its head and tail.
	var runHref string
	run("the run in the history",
		chromedp.Navigate(url+"#/job/big-output"),
		waitFor(`!!document.querySelector('#runs-table tr.run-row[data-status="ok"] a.run-link')`),
		eval(`document.querySelector('#runs-table tr.run-row[data-status="ok"] a.run-link').getAttribute("href")`, &runHref),
	)
	if !strings.HasPrefix(runHref, "#/run/") {
		t.Fatalf("the history links the run to %q, want #/run/ID", runHref)
	}
	type runPage struct {
		Status, Output, Cut, Size, LockKey, LockFence string
		Attempts, Events                              []string
	}
	var rp runPage
	run("the run page",
		chromedp.Click(`#runs-table tr.run-row[data-status="ok"] a.run-link`, chromedp.ByQuery),
		waitFor(`!!document.querySelector('#run-page[data-status="ok"]') && !!document.getElementById("run-output")`),
		eval(`(() => ({
			Status: document.getElementById("run-page").dataset.status,
			Output: document.getElementById("run-output").textContent,
			Cut: (document.getElementById("run-output-cut") || {dataset: {}}).dataset.cut || "",
			Size: document.getElementById("run-output-size").textContent,
			LockKey: document.getElementById("run-lock").dataset.key,
			LockFence: document.getElementById("run-lock").dataset.fence,
			Attempts: [...document.querySelectorAll("#run-attempts tr.attempt-row")].map((tr) => tr.dataset.attempt + " " + tr.dataset.status),
			Events: [...document.querySelectorAll("#run-lock tr.lock-event")].map((tr) => tr.dataset.event),
		}))()`, &rp),
		shot("run.png"),
	)
	written := len("FIRST-LINE\n") + 1<<20 + len("\nLAST-LINE\n")
	marker := fmt.Sprintf("… %d bytes cut …", written-64<<10)
	head, tail, ok := strings.Cut(rp.Output, "\n"+marker+"\n")
	switch {
	case !ok:
		t.Errorf("the run page's output (%d bytes) has no line %q", len(rp.Output), marker)
	case !strings.HasPrefix(head, "FIRST-LINE\na middle line of the output\n") || len(head) != 32<<10:
		t.Errorf("the output's head: %d bytes starting %q, want the first 32 KiB", len(head), head[:min(len(head), 60)])
	case !strings.HasSuffix(tail, "\nLAST-LINE\n") || !strings.Contains(tail, "\na middle line of the output\n") || len(tail) != 32<<10:
		t.Errorf("the output's tail: %d bytes ending %q, want the last 32 KiB", len(tail), tail[max(len(tail)-60, 0):])
	}
	if rp.Cut != strconv.Itoa(written-64<<10) || !strings.HasPrefix(rp.Size, strconv.Itoa(len(rp.Output))+" bytes") {
		t.Errorf("the page says %q bytes stored, %q cut", rp.Size, rp.Cut)
	}
	if strings.Join(rp.Attempts, ",") != "1 ok" || rp.LockKey != "schedule/big-output" || rp.LockFence == "0" || strings.Join(rp.Events, ",") != "taken,released" {
		t.Errorf("attempts %q, lock %q fence %s, events %q", rp.Attempts, rp.LockKey, rp.LockFence, rp.Events)
	}

	// Relative times, the absolute one on hover, counting on.
	type timeView struct{ Text, Title, ISO string }
	const timesJS = `[...document.querySelectorAll("time.t")].map((e) => ({Text: e.textContent, Title: e.title, ISO: e.dateTime}))`
	var before []timeView
	run("times on the run page", eval(timesJS, &before))
	rel := regexp.MustCompile(`^(now|in [0-9]+ (s|min|h|d)( [0-9]+ (min|h))?|[0-9]+ (s|min|h|d)( [0-9]+ (min|h))? ago)$`)
	local := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (EST|EDT|GMT-[45])$`)
	utc := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`)
	if len(before) < 4 {
		t.Fatalf("the run page shows %d times, want its tick, start, end and lock events", len(before))
	}
	for _, tv := range before {
		if !rel.MatchString(tv.Text) || !local.MatchString(tv.Title) {
			t.Errorf("a time reads %q with title %q: want it relative, and in New York time on hover", tv.Text, tv.Title)
		}
		it, err := time.Parse(time.RFC3339Nano, tv.ISO)
		if err != nil {
			t.Fatal(err)
		}
		if want := it.In(mustZone(t, "America/New_York")).Format("2006-01-02 15:04:05"); !strings.HasPrefix(tv.Title, want) {
			t.Errorf("title %q, want %s (New York)", tv.Title, want)
		}
	}
	endSel := `#run-summary tr[data-key="end"] time.t`
	var endText string
	run("the end's relative time counts on",
		eval(`document.querySelector(`+strconv.Quote(endSel)+`).textContent`, &endText),
		waitFor(`document.querySelector(`+strconv.Quote(endSel)+`).textContent !== `+strconv.Quote(endText)),
	)

	// The zone switch: every absolute time turns to UTC, and back.
	absJS := `[...document.querySelectorAll("time.t")].map((e) => e.title).concat([...document.querySelectorAll("#run-summary td .muted")].map((e) => e.textContent.trim()).filter((s) => /^\d{4}-/.test(s)), [document.getElementById("run-title").textContent])`
	var absBefore, absAfter, absReload []string
	run("switch to UTC",
		eval(absJS, &absBefore),
		chromedp.Click(`#zone-switch`, chromedp.ByQuery),
		waitFor(`document.getElementById("zone-switch").dataset.zone === "utc" && !!document.getElementById("run-output") && [...document.querySelectorAll("time.t")].every((e) => e.title.endsWith(" UTC")) &&
			document.getElementById("run-title").textContent.endsWith(" UTC attempt 1")`),
		eval(absJS, &absAfter),
		chromedp.Reload(),
		waitFor(`!!document.getElementById("run-output") && document.getElementById("zone-switch").dataset.zone === "utc"`),
		eval(absJS, &absReload),
	)
	if len(absAfter) != len(absBefore) || len(absBefore) < 6 {
		t.Fatalf("absolute times before the switch %q, after %q", absBefore, absAfter)
	}
	for i := range absBefore {
		b, a := absBefore[i], absAfter[i]
		if i == len(absBefore)-1 { // the title: "run 2026-… EST attempt 1"
			if !strings.Contains(a, " UTC attempt") || a == b {
				t.Errorf("the run's title %q became %q, want its tick in UTC", b, a)
			}
			continue
		}
		if !local.MatchString(b) || !utc.MatchString(a) || a[:19] == b[:19] {
			t.Errorf("time %d: %q became %q, want New York time then UTC", i, b, a)
		}
	}
	if strings.Join(absReload, "|") != strings.Join(absAfter, "|") {
		t.Errorf("after a reload the times are %q, want the UTC ones remembered %q", absReload, absAfter)
	}

	// The job page: the definition and the next 5 ticks, in both zones.
	type tickRow struct{ Tick, Rel, Local, UTC string }
	var ticks []tickRow
	var defKeys []string
	var pageText string
	// charts: the job page's two line charts (chart.js's lineChart) of the
	// runs listed, each a path through both runs and y-axis labels that
	// are durations (fmtMS).
	type chartView struct {
		Paths, Points int
		Name, YLabels string
	}
	var charts map[string]chartView
	run("the job page",
		chromedp.Click(`#zone-switch`, chromedp.ByQuery),
		waitFor(`document.getElementById("zone-switch").dataset.zone === "local"`),
		chromedp.Navigate(url+"#/job/nightly-report"),
		waitFor(`document.querySelectorAll("#job-next-ticks tr.next-tick").length === 5 && !!document.querySelector("#job-def") &&
			document.querySelectorAll('#runs-table tr.run-row[data-status="ok"]').length === 2`),
		eval(`[...document.querySelectorAll("#job-next-ticks tr.next-tick")].map((tr) => ({Tick: tr.dataset.tick,
			Rel: tr.querySelector(".next-rel").textContent, Local: tr.querySelector(".next-local").textContent, UTC: tr.querySelector(".next-utc").textContent}))`, &ticks),
		eval(`[...document.querySelectorAll("#job-def tr.def-row")].map((tr) => tr.dataset.key + "=" + tr.cells[1].textContent)`, &defKeys),
		eval(`Object.fromEntries(["job-duration-chart", "job-lateness-chart"].map((id) => {
			const paths = document.querySelectorAll("#" + id + " svg.chart.line-chart path.series");
			const d = paths.length ? paths[0].getAttribute("d") : "";
			return [id, {Paths: paths.length, Points: (d.match(/[ML]/g) || []).length, Name: paths.length ? paths[0].dataset.name : "",
				YLabels: [...document.querySelectorAll("#" + id + " svg.chart g.y-axis text")].map((e) => e.textContent).join("|")}];
		}))`, &charts),
		shot("job.png"),
	)
	for id, name := range map[string]string{"job-duration-chart": "duration", "job-lateness-chart": "lateness"} {
		c := charts[id]
		if c.Paths != 1 || c.Name != name || c.Points != 2 {
			t.Errorf("#%s has %d series (%q) through %d points, want one %q line through the 2 runs", id, c.Paths, c.Name, c.Points, name)
		}
		if !regexp.MustCompile(`^0 ms(\|[0-9.]+ (ms|s|min))+$`).MatchString(c.YLabels) {
			t.Errorf("#%s's y-axis reads %q, want durations from 0 ms", id, c.YLabels)
		}
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	prev := time.Now()
	for i, r := range ticks {
		tk, err := time.Parse(time.RFC3339, r.Tick)
		if err != nil || !tk.After(prev) || tk.In(berlin).Format("15:04:05") != "02:30:00" && tk.In(berlin).Format("15:04:05") != "03:30:00" {
			t.Errorf("tick %d: %q (%v), want the next 02:30 in Berlin", i, r.Tick, err)
		}
		prev = tk
		if r.UTC != tk.UTC().Format("2006-01-02 15:04:05 UTC") || !local.MatchString(r.Local) || !strings.HasPrefix(r.Local, tk.In(mustZone(t, "America/New_York")).Format("2006-01-02 15:04:05")) || !strings.HasPrefix(r.Rel, "in ") {
			t.Errorf("tick %d shows %+v, want it relative, in New York time and in UTC", i, r)
		}
	}
	def := strings.Join(defKeys, "\n")
	for _, w := range []string{"schedule=0 30 2 * * * Europe/Berlin", `command=sh -c "echo report for tick $TASKLOCK_TICK"`, "timeout=10 min", "retries=2", "pool=reports", "nodes=zone=eu", "run_on=any", "overlap=skip"} {
		if !strings.Contains(def, w) {
			t.Errorf("the definition lacks %q:\n%s", w, def)
		}
	}
	// flaky's failure is notified (its first outcome), through the
	// command: the job page lists the delivery. It is logged after the
	// run ends, so wait for it through the API before opening the page.
	deadline := time.Now().Add(45 * time.Second)
	for {
		res, err := http.Get(url + "api/notifications?job=flaky")
		if err != nil {
			t.Fatal(err)
		}
		var log struct{ Notifications []struct{ Result string } }
		err = json.NewDecoder(res.Body).Decode(&log)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(log.Notifications) > 0 && log.Notifications[0].Result == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivered notification of flaky's failure within 45 s: %+v\nserve stderr:\n%s", log, p.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var delivery []string
	run("the notifications on the job page",
		chromedp.Navigate(url+"#/job/flaky"),
		waitFor(`!!document.querySelector('#notifications-table tr.notify-row[data-event="failure"][data-result="delivered"]')`),
		eval(`[...document.querySelectorAll("#notifications-table tr.notify-row")].map((tr) => tr.dataset.event + " " + tr.dataset.result + " " + tr.querySelector("td.notify-target").textContent)`, &delivery),
		chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.Screenshot(`#job-notifications`, &buf, chromedp.ByQuery).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, "notifications.png"), buf, 0o644)
		}),
	)
	if len(delivery) != 1 || !strings.HasPrefix(delivery[0], "failure delivered command ") {
		t.Errorf("flaky's notifications on its page: %q, want one failure delivered by the command", delivery)
	}
	run("the http job's page",
		chromedp.Navigate(url+"#/job/webhook"),
		waitFor(`(document.getElementById("job-title") || {}).textContent === "webhook" && !!document.querySelector('#job-def tr.def-row[data-key="http"]')`),
		eval(`document.getElementById("main").textContent`, &pageText),
	)
	for _, secret := range []string{pw, hookToken, bearer} {
		if strings.Contains(pageText, secret) {
			t.Errorf("the webhook job's page shows a secret (%s)", secret)
		}
	}
	if !strings.Contains(pageText, "POST https://user:xxxxx@hooks.example/run") {
		t.Errorf("the webhook job's page does not show its request:\n%s", pageText)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("the pages logged errors to the console:\n%s", strings.Join(e, "\n"))
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
