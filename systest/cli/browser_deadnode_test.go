//go:build linux

package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// An interrupted run's end is when another node noticed its node had
// stopped, not when its command stopped: the job's history, the run's
// page and its attempts give its duration as a bound ("≤ 9.6 s"), and the
// job's duration chart leaves it out rather than draw a run twice the
// job's usual length. Before: "9.6 s", as if it had run that long, for a
// 5 s job whose node was SIGKILLed 1.8 s in. The tick skipped because the
// dead node's run still held the lock shows no fence (it took no lock),
// and its page does not put that down to overlap: allow. The overview
// names the gone nodes beside the count of those alive. Before: fence
// "0", and "no lock taken (overlap: allow)" for an overlap: skip job; the
// overview said "Nodes alive 2" and nothing of the third.
func TestDashboardInBrowserDeadNodeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium := testserver.Require(t, "chromium")
	st := memstore.New(nil)
	tick := time.Now().UTC().Truncate(10 * time.Second).Add(-time.Minute)
	var recs []ledger.RunRecord
	for i := range 3 { // three ok runs of 5 s, then the interrupted one
		tk := tick.Add(time.Duration(i-3) * 10 * time.Second)
		recs = append(recs, ledger.RunRecord{Job: "long", Tick: tk, Attempt: 1, Node: "n1", Fence: uint64(i + 1),
			Start: tk, End: tk.Add(5 * time.Second), Status: ledger.RunOK})
	}
	recs = append(recs, ledger.RunRecord{Job: "long", Tick: tick, Attempt: 1, Node: "n3", Fence: 4,
		Start: tick, End: tick.Add(9600 * time.Millisecond), Status: ledger.RunInterrupted,
		Error: `schedule: run interrupted: node "n3" stopped before it recorded the outcome: its node lease ended (noticed by "n1")`})
	// The next tick, skipped: the dead node's run still held the lock.
	skipTick := tick.Add(10 * time.Second)
	recs = append(recs, ledger.RunRecord{Job: "long", Tick: skipTick, Attempt: 1, Node: "n2", End: skipTick, Status: ledger.RunSkipped,
		Error: `schedule: the previous run is still in progress: tasklock: not obtained: "schedule/long" is held by n3`})
	if err := st.RecordRuns(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	// n1 holds its node lease; n2 and n3 hold none: gone.
	if _, err := st.Acquire(context.Background(), driver.AcquireParams{Key: "serve/node/n1", Token: "t", Owner: dashboard.NodeOwner("n1", "v1"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(dashboard.Options{Store: st, Node: "n1",
		Jobs: func() []schedule.Job { return []schedule.Job{{Name: "long", Schedule: "@every 10s"}} }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ctx := newBrowser(t, chromium, 60*time.Second, chromedp.WindowSize(1280, 900))
	errs := consoleErrors(ctx)
	var ok bool
	waitFor := func(js string) chromedp.Action {
		return chromedp.Poll(js, &ok, chromedp.WithPollingTimeout(30*time.Second))
	}
	var rowDur, chartLabels, runDur, attemptDur, endLabel string
	sel := `#runs-table tr.run-row[data-status="interrupted"]`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/job/long"),
		waitFor(`!!document.querySelector('`+sel+`') && !!document.querySelector("#job-duration-chart svg")`),
		chromedp.Evaluate(`document.querySelector('`+sel+`').children[7].textContent`, &rowDur),
		chromedp.Evaluate(`document.querySelector("#job-duration-chart svg").textContent`, &chartLabels),
		chromedp.Evaluate(`document.querySelector('`+sel+` a.run-link').click(); true`, &ok),
		waitFor(`document.getElementById("run-page") && document.getElementById("run-page").dataset.status === "interrupted"`),
		chromedp.Evaluate(`document.querySelector('#run-summary tr[data-key="duration"] td').textContent`, &runDur),
		chromedp.Evaluate(`document.querySelector('#run-summary tr[data-key="end"] th').textContent`, &endLabel),
		chromedp.Evaluate(`document.querySelector('#run-attempts tr.attempt-row[data-status="interrupted"]').children[5].textContent`, &attemptDur),
	); err != nil {
		t.Fatalf("%v\nconsole errors: %q", err, errs())
	}
	// A skipped run took no lock: no fence, and not for overlap: allow.
	var skipFence, skipRunFence, skipLock string
	skipSel := `#runs-table tr.run-row[data-status="skipped"]`
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/job/long"),
		waitFor(`!!document.querySelector('`+skipSel+`')`),
		chromedp.Evaluate(`document.querySelector('`+skipSel+`').children[6].textContent`, &skipFence),
		chromedp.Evaluate(`document.querySelector('`+skipSel+` a.run-link').click(); true`, &ok),
		waitFor(`document.getElementById("run-page") && document.getElementById("run-page").dataset.status === "skipped"`),
		chromedp.Evaluate(`document.querySelector('#run-summary tr[data-key="fence"] td').textContent`, &skipRunFence),
		chromedp.Evaluate(`document.querySelector("#run-lock p").textContent`, &skipLock),
	); err != nil {
		t.Fatalf("%v\nconsole errors: %q", err, errs())
	}
	if skipFence != "—" || skipRunFence != "—" {
		t.Errorf("a skipped run's fence: %q in the history, %q on its page; want —", skipFence, skipRunFence)
	}
	if strings.Contains(skipLock, "overlap") || !strings.Contains(skipLock, "did not start") {
		t.Errorf("a skipped run's lock: %q, want it said the run did not start", skipLock)
	}
	// The overview counts the nodes alive and names the gone ones.
	var nodesFigure, nodesDetail string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#/overview"),
		waitFor(`!!document.querySelector('#overview-cards .card[data-figure="nodes"] .card-detail')`),
		chromedp.Evaluate(`document.querySelector('#overview-cards .card[data-figure="nodes"] .figure').textContent`, &nodesFigure),
		chromedp.Evaluate(`document.querySelector('#overview-cards .card[data-figure="nodes"] .card-detail').textContent`, &nodesDetail),
	); err != nil {
		t.Fatalf("%v\nconsole errors: %q\noverview's nodes card: %q", err, errs(), nodesFigure)
	}
	if nodesFigure != "1" || !strings.Contains(nodesDetail, "2 gone") || !strings.Contains(nodesDetail, "n3") || !strings.Contains(nodesDetail, "last seen") {
		t.Errorf("overview's nodes card: %q, detail %q; want 1 alive, n2 and n3 gone with when last seen", nodesFigure, nodesDetail)
	}
	// The interrupted badge's dashes stay off its text (they struck
	// through it, drawn 3px inside a badge of 11px text on the overview).
	var offset float64
	if err := chromedp.Run(ctx, chromedp.Evaluate(`parseFloat(getComputedStyle(document.querySelector('#overview-cards .status-interrupted')).outlineOffset)`, &offset)); err != nil {
		t.Fatalf("%v\nconsole errors: %q", err, errs())
	}
	if offset < 0 {
		t.Errorf("the interrupted badge's outline is drawn %vpx inside it, over its text", -offset)
	}
	if rowDur != "≤ 9.6 s" {
		t.Errorf("the history's duration of the interrupted run: %q, want ≤ 9.6 s", rowDur)
	}
	if strings.Contains(chartLabels, "10 s") || strings.Contains(chartLabels, "9.6 s") {
		t.Errorf("the duration chart's scale reaches the interrupted run's end − start: %q", chartLabels)
	}
	if !strings.HasPrefix(runDur, "≤ 9.6 s") || !strings.Contains(runDur, "noticed") {
		t.Errorf("the run page's duration: %q, want ≤ 9.6 s and why", runDur)
	}
	if attemptDur != "≤ 9.6 s" {
		t.Errorf("the attempts table's duration: %q, want ≤ 9.6 s", attemptDur)
	}
	if endLabel == "Ended" {
		t.Errorf("the run page calls when the run was found interrupted %q", endLabel)
	}
	if e := errs(); len(e) > 0 {
		t.Errorf("console errors: %q", e)
	}
}
