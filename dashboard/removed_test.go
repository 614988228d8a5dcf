package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// A trigger and a retry of a job that looks removed from every node (its
// next tick after its latest record well past, nothing recorded) are
// refused with 409 saying why, as jobs trigger refuses it, unless forced
// (force in the body or ?force=1): the request would wait, pending,
// forever. A live job, and a job of the node serving the dashboard
// however its ledger looks, are accepted. Before, both were accepted and
// the request never ran.
func TestDashboardRefusesRemovedJob(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
		now := clk.Now()
		// gone and mine last ran an hour ago; live at its latest tick.
		// mine is this node's (Options.Jobs) on the node's dashboard.
		lastOf := map[string]time.Time{"gone": now.Add(-time.Hour).Truncate(time.Minute), "mine": now.Add(-time.Hour).Truncate(time.Minute), "live": now.Truncate(time.Minute)}
		for job, last := range lastOf {
			if _, err := st.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "@every 1m", Since: now.Add(-2 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			err := st.RecordRuns(ctx, []ledger.RunRecord{
				{Job: job, Tick: last.Add(-time.Minute), Attempt: 1, Node: "n2", Start: last.Add(-time.Minute), End: last, Status: ledger.RunFailed},
				{Job: job, Tick: last.Add(-30 * time.Second), Trigger: "tr-" + job, Attempt: 1, Node: "n2", Start: last, End: last, Status: ledger.RunTimeout},
				{Job: job, Tick: last, Attempt: 1, Node: "n2", Start: last, End: last, Status: ledger.RunOK},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		mine := []schedule.Job{{Name: "mine", Schedule: "@every 1m"}}
		node := server(t, st, testToken, func(o *dashboard.Options) {
			o.Jobs = func() []schedule.Job { return mine }
			o.Clock = clk
		})
		alone := server(t, st, testToken, func(o *dashboard.Options) {
			o.Jobs = nil
			o.Clock = clk
		})
		bearer := map[string]string{"Authorization": "Bearer " + testToken}
		pending := func(job string) int {
			t.Helper()
			sts, err := st.Jobs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sts {
				if s.Job == job {
					return len(s.Triggers)
				}
			}
			return 0
		}
		// failed is a retry body naming job's failed scheduled run,
		// timedOut its timed out triggered run; extra goes into the JSON.
		failed := func(job, extra string) string {
			return fmt.Sprintf(`{"job":%q,"tick":%q%s}`, job, lastOf[job].Add(-time.Minute).Format(time.RFC3339), extra)
		}
		timedOut := func(job, extra string) string {
			return fmt.Sprintf(`{"job":%q,"tick":%q,"trigger":"tr-%s"%s}`, job, lastOf[job].Add(-30*time.Second).Format(time.RFC3339), job, extra)
		}

		refused := []struct {
			name, url, body string
		}{
			{"trigger", alone.URL + "/api/jobs/gone/trigger", ""},
			{"trigger with a note", alone.URL + "/api/jobs/gone/trigger", `{"note":"n","force":false}`},
			{"retry of a tick", node.URL + "/api/runs/retry", failed("gone", "")},
			{"retry of a trigger", node.URL + "/api/runs/retry", timedOut("gone", "")},
			{"retry of a tick on its own", alone.URL + "/api/runs/retry", failed("gone", `,"force":false`)},
			{"retry ?force=0", node.URL + "/api/runs/retry?force=0", timedOut("gone", "")},
		}
		for _, c := range refused {
			code, b, _ := call(t, nil, "POST", c.url, bearer, c.body)
			if code != http.StatusConflict || !strings.Contains(b, `"error":"job \"gone\" looks removed from the configuration of every node of serve: `) ||
				!strings.Contains(b, "more than 1m0s past") || !strings.Contains(b, "force") {
				t.Errorf("%s of gone: %d %s, want 409 saying it looks removed", c.name, code, b)
			}
		}
		if n := pending("gone"); n != 0 {
			t.Fatalf("refused requests left %d pending for gone, want none", n)
		}

		accepted := []struct {
			name, url, body string
			code            int
			job             string
		}{
			{"trigger of a live job", alone.URL + "/api/jobs/live/trigger", "", http.StatusOK, "live"},
			{"retry of a live job's tick", node.URL + "/api/runs/retry", failed("live", ""), http.StatusAccepted, "live"},
			{"retry of a live job's trigger", alone.URL + "/api/runs/retry", timedOut("live", ""), http.StatusAccepted, "live"},
			{"trigger of this node's job", node.URL + "/api/jobs/mine/trigger", "", http.StatusOK, "mine"},
			{"retry of this node's job", node.URL + "/api/runs/retry", failed("mine", ""), http.StatusAccepted, "mine"},
			{"forced trigger (body)", alone.URL + "/api/jobs/gone/trigger", `{"note":"n","force":true}`, http.StatusOK, "gone"},
			{"forced trigger (?force=1)", alone.URL + "/api/jobs/gone/trigger?force=1", "", http.StatusOK, "gone"},
			{"forced retry of a tick (body)", node.URL + "/api/runs/retry", failed("gone", `,"force":true`), http.StatusAccepted, "gone"},
			{"forced retry of a trigger (?force=1)", node.URL + "/api/runs/retry?force=1", timedOut("gone", ""), http.StatusAccepted, "gone"},
		}
		for _, c := range accepted {
			before := pending(c.job)
			if code, b, _ := call(t, nil, "POST", c.url, bearer, c.body); code != c.code {
				t.Errorf("%s: %d %s, want %d", c.name, code, b, c.code)
			}
			if n := pending(c.job); n != before+1 {
				t.Errorf("%s: %d pending for %s, want %d", c.name, n, c.job, before+1)
			}
		}

		for _, c := range []struct{ name, url, body, want string }{
			{"trigger ?force=maybe", alone.URL + "/api/jobs/gone/trigger?force=maybe", "", `force: want 1 or 0, got \"maybe\"`},
			{"retry with a force that is not a boolean", node.URL + "/api/runs/retry", failed("gone", `,"force":"yes"`), "body:"},
			{"cancel with force", node.URL + "/api/runs/cancel", failed("gone", `,"force":true`), "force: a cancel takes none"},
		} {
			if code, b, _ := call(t, nil, "POST", c.url, bearer, c.body); code != http.StatusBadRequest || !strings.Contains(b, c.want) {
				t.Errorf("%s: %d %s, want 400 with %s", c.name, code, b, c.want)
			}
		}
	})
}

// A job deleted at run time (its newest catalog entry is a delete) and not
// run since is refused by a trigger as one taken out of every node's file
// is, however recently it ran: jobs trigger, rerun and backfill refuse it
// too, with the same words.
func TestDashboardRefusesDeletedJob(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		cat, ok := st.(ledger.Catalog)
		if !ok {
			t.Fatalf("%T keeps no catalog: the dashboard's stores all do", st)
		}
		ctx := context.Background()
		clk := &stepClock{now: time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
		last := clk.Now().Truncate(time.Minute) // ran at its latest tick: not late
		if _, err := st.SetJobState(ctx, ledger.JobStateParams{Job: "rt", Op: ledger.JobRegister, Spec: "@every 1m", Since: last.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordRuns(ctx, []ledger.RunRecord{{Job: "rt", Tick: last, Attempt: 1, Node: "n2", Start: last, End: last, Status: ledger.RunOK}}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []ledger.JobDefParams{
			{Job: "rt", Def: "name: rt\nschedule: \"@every 1m\"\ncommand: [\"true\"]\n", Audit: ledger.AuditEntry{Action: "create", Who: "cli:test"}},
			{Job: "rt", Delete: true, Audit: ledger.AuditEntry{Action: "delete", Who: "cli:test"}},
		} {
			if _, err := cat.PutJobDef(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		alone := server(t, st, testToken, func(o *dashboard.Options) {
			o.Jobs = nil
			o.Clock = clk
		})
		bearer := map[string]string{"Authorization": "Bearer " + testToken}
		code, b, _ := call(t, nil, "POST", alone.URL+"/api/jobs/rt/trigger", bearer, "")
		if code != http.StatusConflict || !strings.Contains(b, `looks removed from the configuration of every node of serve: it was deleted at run time by cli:test`) {
			t.Errorf("trigger of a deleted job: %d %s, want 409 saying it was deleted", code, b)
		}
		if code, b, _ := call(t, nil, "POST", alone.URL+"/api/jobs/rt/trigger?force=1", bearer, ""); code != http.StatusOK {
			t.Errorf("forced trigger of a deleted job: %d %s, want 200", code, b)
		}
	})
}
