//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

// jobClient changes the jobs defined at run time and reads them back: the
// dashboard's API (apiClient) or the CLI (cliClient).
type jobClient interface {
	create(t *testing.T, snippet string)
	update(t *testing.T, name, snippet string)
	delete(t *testing.T, name string, cancel bool)
	audit(t *testing.T, job string) []apijson.Audit
	runs(t *testing.T, job string) []apijson.Run
	who() *regexp.Regexp
}

// apiClient talks to a serve's dashboard with its token.
type apiClient struct {
	base, token string
	client      *http.Client
}

func (c *apiClient) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *apiClient) create(t *testing.T, snippet string) {
	t.Helper()
	if code, body := c.do(t, "POST", "/api/jobs", snippet); code != http.StatusCreated {
		t.Fatalf("POST /api/jobs: %d %s", code, body)
	}
}

func (c *apiClient) update(t *testing.T, name, snippet string) {
	t.Helper()
	if code, body := c.do(t, "PUT", "/api/jobs/"+name, snippet); code != http.StatusOK {
		t.Fatalf("PUT /api/jobs/%s: %d %s", name, code, body)
	}
}

func (c *apiClient) delete(t *testing.T, name string, cancel bool) {
	t.Helper()
	path := "/api/jobs/" + name
	if cancel {
		path += "?cancel=1"
	}
	if code, body := c.do(t, "DELETE", path, ""); code != http.StatusOK {
		t.Fatalf("DELETE %s: %d %s", path, code, body)
	}
}

func (c *apiClient) audit(t *testing.T, job string) []apijson.Audit {
	t.Helper()
	code, body := c.do(t, "GET", "/api/audit?job="+job, "")
	var out struct{ Audit []apijson.Audit }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("GET /api/audit: %d %s", code, body)
	}
	return out.Audit
}

func (c *apiClient) runs(t *testing.T, job string) []apijson.Run {
	t.Helper()
	code, body := c.do(t, "GET", "/api/runs?limit=1000&job="+job, "")
	var out struct{ Runs []apijson.Run }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("GET /api/runs: %d %s", code, body)
	}
	return out.Runs
}

func (c *apiClient) who() *regexp.Regexp { return regexp.MustCompile(`^api:token$`) }

// cliClient runs tasklock jobs on a store.
type cliClient struct{ store, dir string }

func (c *cliClient) run(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := tl.Run(t, nil, append(append([]string{"jobs"}, args...), "--store", c.store)...)
	if code != exitOK {
		t.Fatalf("tasklock jobs %s = %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func (c *cliClient) file(t *testing.T, snippet string) string {
	t.Helper()
	f, err := os.CreateTemp(c.dir, "job-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(snippet); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func (c *cliClient) create(t *testing.T, snippet string) {
	t.Helper()
	c.run(t, "create", "-f", c.file(t, snippet))
}

func (c *cliClient) update(t *testing.T, name, snippet string) {
	t.Helper()
	c.run(t, "update", name, "-f", c.file(t, snippet))
}

func (c *cliClient) delete(t *testing.T, name string, cancel bool) {
	t.Helper()
	if cancel {
		c.run(t, "delete", name, "--cancel")
	} else {
		c.run(t, "delete", name)
	}
}

func (c *cliClient) audit(t *testing.T, job string) []apijson.Audit {
	t.Helper()
	var out struct{ Audit []apijson.Audit }
	if err := json.Unmarshal([]byte(c.run(t, "audit", "--job", job, "--json")), &out); err != nil {
		t.Fatal(err)
	}
	return out.Audit
}

func (c *cliClient) runs(t *testing.T, job string) []apijson.Run {
	t.Helper()
	var out struct{ Runs []apijson.Run }
	if err := json.Unmarshal([]byte(c.run(t, "history", "--job", job, "--limit", "1000", "--json")), &out); err != nil {
		t.Fatal(err)
	}
	return out.Runs
}

func (c *cliClient) who() *regexp.Regexp { return regexp.MustCompile(`^cli:[^@]+@.+$`) }

// requireCatalog skips the test when the store at url keeps no catalog of
// jobs defined at run time.
func requireCatalog(t *testing.T, url string) {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := store.(ledger.Catalog); !ok {
		// TODO(issue 14): remove once this store's Catalog is on main.
		t.Skipf("%T keeps no ledger.Catalog yet", store)
	}
}

// outLine is a line the test's commands append to $OUT: "WHAT TICK NODE".
type outLine struct {
	what string
	tick int64
	node string
}

func readOut(t *testing.T, path string) []outLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []outLine
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue // a line being written
		}
		tm, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		out = append(out, outLine{f[0], tm.Unix(), f[2]})
	}
	return out
}

func linesOf(ls []outLine, what string) []outLine {
	var out []outLine
	for _, l := range ls {
		if l.what == what {
			out = append(out, l)
		}
	}
	return out
}

// jobSnippet is a job that appends "WHAT $TASKLOCK_TICK $TASKLOCK_NODE"
// to $OUT, and with sleep, sleeps and appends "WHAT-end ...".
func jobSnippet(name, schedule, what string, sleep int) string {
	cmd := `echo "` + what + ` $TASKLOCK_TICK $TASKLOCK_NODE" >> "$OUT"`
	if sleep > 0 {
		cmd += fmt.Sprintf(`; sleep %d; echo "%s-end $TASKLOCK_TICK $TASKLOCK_NODE" >> "$OUT"`, sleep, what)
	}
	return fmt.Sprintf("name: %s\nschedule: %q\ncommand: [sh, -c, %s]\nkill_grace: 500ms\n", name, schedule, strconv.Quote(cmd))
}

// waitApplied waits until every node logged that it applied version of
// job and returns how long after since the last of them did, by the
// log lines' times.
func waitApplied(t *testing.T, nodes []*clitest.Proc, job string, version int, since time.Time) time.Duration {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`"time":"([^"]+)"[^\n]*"msg":"job defined at run time applied","job":"%s","version":%d`, job, version))
	var last time.Duration
	for _, p := range nodes {
		p.WaitStderr(re.String(), 10*time.Second)
		at, err := time.Parse(time.RFC3339Nano, re.FindStringSubmatch(p.Stderr())[1])
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, at.Sub(since))
	}
	return last
}

// changedAt is when the newest audit entry of job was written, by the
// store's clock: when the change was made.
func changedAt(t *testing.T, c jobClient, job string) time.Time {
	t.Helper()
	es := c.audit(t, job)
	if len(es) == 0 {
		t.Fatalf("no audit entry of %s", job)
	}
	return es[0].At
}

func waitDeleted(t *testing.T, nodes []*clitest.Proc, job string, version int, cancel bool) {
	t.Helper()
	re := fmt.Sprintf(`"msg":"job defined at run time deleted","job":"%s","version":%d,"cancel_running":%t`, job, version, cancel)
	for _, p := range nodes {
		p.WaitStderr(re, 10*time.Second)
	}
}

// runtimeJobsScenario creates a job through c, sees every node apply it
// within a second and run it once a tick, changes its schedule, deletes
// it while it runs — letting the run finish, then cancelling it — and
// reads the audit. The nodes run the file job "clock" every second and
// have $OUT set to out.
func runtimeJobsScenario(t *testing.T, c jobClient, nodes []*clitest.Proc, out string) {
	start := time.Now()
	c.create(t, jobSnippet("beat", "@every 1s", "beat", 0))
	took := waitApplied(t, nodes, "beat", 1, changedAt(t, c, "beat"))
	t.Logf("create applied by %d node(s) %v after it was written", len(nodes), took)
	if took > time.Second {
		t.Errorf("create took %v to reach every node, want a second at most", took)
	}
	clitest.WaitFor(t, 20*time.Second, func() bool { return len(linesOf(readOut(t, out), "beat")) >= 3 }, "3 runs of beat")

	// A new schedule: the runs after it are on even seconds.
	c.update(t, "beat", jobSnippet("beat", "@every 2s", "beat2", 0))
	took = waitApplied(t, nodes, "beat", 2, changedAt(t, c, "beat"))
	t.Logf("update applied by every node %v after it was written", took)
	if took > time.Second {
		t.Errorf("update took %v to reach every node, want a second at most", took)
	}
	clitest.WaitFor(t, 20*time.Second, func() bool { return len(linesOf(readOut(t, out), "beat2")) >= 2 }, "2 runs of beat on its new schedule")
	for _, l := range linesOf(readOut(t, out), "beat2") {
		if l.tick%2 != 0 {
			t.Errorf("a run on the new schedule @every 2s at tick %d", l.tick)
		}
	}

	// Deleted while running, without cancel: the run finishes.
	c.update(t, "beat", jobSnippet("beat", "@every 1s", "slow", 2))
	waitApplied(t, nodes, "beat", 3, start)
	clitest.WaitFor(t, 20*time.Second, func() bool { return len(linesOf(readOut(t, out), "slow")) >= 1 }, "a slow run to start")
	running := linesOf(readOut(t, out), "slow")[0]
	c.delete(t, "beat", false)
	waitDeleted(t, nodes, "beat", 3, false)
	deleted := time.Now().Unix()
	clitest.WaitFor(t, 20*time.Second, func() bool {
		for _, l := range linesOf(readOut(t, out), "slow-end") {
			if l.tick == running.tick {
				return true
			}
		}
		return false
	}, "the run in progress to finish after the delete")
	// Two ticks of the file's clock later, no run of beat started after
	// the delete.
	clitest.WaitFor(t, 20*time.Second, func() bool {
		n := 0
		for _, l := range linesOf(readOut(t, out), "clock") {
			if l.tick > deleted+1 {
				n++
			}
		}
		return n >= 2
	}, "two ticks of the clock job after the delete")
	for _, l := range linesOf(readOut(t, out), "slow") {
		if l.tick > deleted {
			t.Errorf("the deleted job started a run at tick %d, after its delete at %d", l.tick, deleted)
		}
	}

	// Created again (its versions go on), deleted with cancel: the run
	// is stopped and recorded cancelled, not failed, and not retried.
	c.create(t, jobSnippet("beat", "@every 1s", "doomed", 30)+"retries: {max: 2}\n")
	waitApplied(t, nodes, "beat", 4, start)
	clitest.WaitFor(t, 20*time.Second, func() bool { return len(linesOf(readOut(t, out), "doomed")) >= 1 }, "a long run to start")
	doomed := linesOf(readOut(t, out), "doomed")[0]
	c.delete(t, "beat", true)
	waitDeleted(t, nodes, "beat", 4, true)
	var rec apijson.Run
	clitest.WaitFor(t, 20*time.Second, func() bool {
		for _, r := range c.runs(t, "beat") {
			if r.Tick.Unix() == doomed.tick && r.Status != string(ledger.RunRunning) && r.Trigger == "" {
				rec = r
				return true
			}
		}
		return false
	}, "the cancelled run's record")
	if rec.Status != string(ledger.RunCancelled) || rec.Attempt != 1 || !strings.Contains(rec.Error, "job removed") {
		t.Errorf("the cancelled run's record: %+v, want attempt 1 cancelled with \"job removed\"", rec)
	}
	if ends := linesOf(readOut(t, out), "doomed-end"); len(ends) > 0 {
		t.Errorf("the cancelled run finished: %+v", ends)
	}

	// Every tick ran once, on one node.
	seen := map[string]string{}
	for _, l := range readOut(t, out) {
		k := l.what + " " + strconv.FormatInt(l.tick, 10)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s ran twice: on %s and %s", k, prev, l.node)
		}
		seen[k] = l.node
	}

	// The audit: who, when, what, newest first.
	es := c.audit(t, "beat")
	var actions []string
	for _, e := range es {
		actions = append(actions, e.Action)
		if !c.who().MatchString(e.Who) {
			t.Errorf("audit entry %+v: who %q, want %v", e, e.Who, c.who())
		}
		if e.At.Before(start.Add(-time.Minute)) || e.At.After(time.Now().Add(time.Minute)) {
			t.Errorf("audit entry %+v: at %v, not during the test", e, e.At)
		}
	}
	want := []string{"delete", "create", "delete", "update", "update", "create"}
	if strings.Join(actions, ",") != strings.Join(want, ",") {
		t.Fatalf("audit actions %v, want %v", actions, want)
	}
	if !sort.SliceIsSorted(es, func(i, j int) bool { return es[i].Seq > es[j].Seq }) {
		t.Errorf("audit not newest first: %+v", es)
	}
	if d := es[4].Detail; !strings.Contains(d, `schedule: "@every 1s" -> "@every 2s"`) {
		t.Errorf("the update's detail %q does not say the schedule changed", d)
	}
	if es[0].Detail != apijson.DeleteCancel || es[2].Detail != apijson.DeleteFinish {
		t.Errorf("the deletes' details %q and %q", es[0].Detail, es[2].Detail)
	}
}

// clockConfig is a serve configuration on store with the file job "clock",
// which appends a line to $OUT every second.
func clockConfig(store string) string {
	return "store: " + store + "\njobs:\n" + indent(jobSnippet("clock", "@every 1s", "clock", 0))
}

func indent(snippet string) string {
	lines := strings.Split(strings.TrimSuffix(snippet, "\n"), "\n")
	for i, l := range lines {
		if i == 0 {
			lines[i] = "  - " + l
		} else {
			lines[i] = "    " + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestRuntimeJobsAPI: a serve on mem:// applies the jobs its dashboard's
// API defines, and refuses bad definitions and the file's own jobs.
func TestRuntimeJobsAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := writeConfig(t, dir, clockConfig("mem://"))
	p := tl.Start(t, []string{"TASKLOCK_TOKEN=s3cret", "OUT=" + out}, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--log-format", "json")
	p.WaitStderr(`"msg":"dashboard"`, 20*time.Second)
	base := strings.TrimSuffix(regexp.MustCompile(`"url":"([^"]+)"`).FindStringSubmatch(p.Stderr())[1], "/")
	c := &apiClient{base: base, token: "s3cret", client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}

	if code, body := c.do(t, "POST", "/api/jobs", jobSnippet("clock", "@every 5s", "x", 0)); code != http.StatusConflict || !strings.Contains(body, "configuration file") {
		t.Errorf("POST of the file's job: %d %s, want 409", code, body)
	}
	if code, body := c.do(t, "POST", "/api/jobs", "name: bad\nschedule: '@every 1s'\ncommand: [true]\ntimeout: 10x\n"); code != http.StatusBadRequest ||
		!strings.Contains(body, `request body:4: job \"bad\": timeout: invalid duration \"10x\"`) {
		t.Errorf("POST of a bad job: %d %s, want 400 naming the line and key", code, body)
	}
	if code, body := c.do(t, "PUT", "/api/jobs/nope", jobSnippet("nope", "@every 1s", "x", 0)); code != http.StatusNotFound {
		t.Errorf("PUT of an undefined job: %d %s, want 404", code, body)
	}
	if code, body := c.do(t, "DELETE", "/api/jobs/clock", ""); code != http.StatusNotFound {
		t.Errorf("DELETE of the file's job: %d %s, want 404", code, body)
	}
	anon, err := http.Post(base+"/api/jobs", "application/yaml", strings.NewReader(jobSnippet("sneaky", "@every 1s", "x", 0)))
	if err != nil {
		t.Fatal(err)
	}
	anon.Body.Close()
	if anon.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous POST /api/jobs: %d, want 401", anon.StatusCode)
	}

	runtimeJobsScenario(t, c, []*clitest.Proc{p}, out)

	// The dashboard lists the runtime job while it exists; pause is audited.
	c.create(t, jobSnippet("listed", "@every 1h", "x", 0)+"shards: 3\n")
	waitApplied(t, []*clitest.Proc{p}, "listed", 1, time.Now())
	// A job whose lock another job takes is refused, as by jobs create.
	if code, body := c.do(t, "POST", "/api/jobs", jobSnippet("listed/shard/2", "@every 1h", "x", 0)); code != http.StatusBadRequest ||
		!strings.Contains(body, `\"listed/shard/2\" cannot run beside a job defined at run time`) || !strings.Contains(body, `shard 2 of job \"listed\"`) {
		t.Errorf("POST of a job sharing a shard's lock: %d %s, want 400 naming the shard", code, body)
	}
	if code, body := c.do(t, "GET", "/api/jobs?name=listed", ""); code != http.StatusOK || !strings.Contains(body, `"configured":true`) {
		t.Errorf("GET /api/jobs?name=listed: %d %s", code, body)
	}
	if code, body := c.do(t, "POST", "/api/jobs/listed/pause", ""); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	if es := c.audit(t, "listed"); len(es) != 2 || es[0].Action != "pause" || es[0].Who != "api:token" {
		t.Errorf("audit after pause: %+v", es)
	}
	// A reload that changes the file keeps the jobs defined at run time:
	// the new Scheduler gets them at once.
	writeConfig(t, dir, clockConfig("mem://")+indent(jobSnippet("clock2", "@hourly", "x", 0)))
	p.Signal(syscall.SIGHUP)
	p.WaitStderr(`"msg":"reloaded"`, 20*time.Second)
	applied := `"msg":"job defined at run time applied","job":"listed","version":1`
	p.WaitUntil(10*time.Second, func() bool { return strings.Count(p.Stderr(), applied) == 2 }, "listed applied to the reloaded Scheduler")
	if code, body := c.do(t, "GET", "/api/jobs?name=listed", ""); code != http.StatusOK || !strings.Contains(body, `"configured":true`) {
		t.Errorf("after the reload, GET /api/jobs?name=listed: %d %s", code, body)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
}

// startNodes starts n serve nodes on cfg with $OUT set to out.
func startNodes(t *testing.T, n int, cfg, out string) []*clitest.Proc {
	t.Helper()
	var nodes []*clitest.Proc
	for i := range n {
		p := tl.Start(t, []string{"OUT=" + out}, "serve", "--config", cfg, "--http", "", "--log-format", "json", "--node", fmt.Sprintf("node-%d", i))
		nodes = append(nodes, p)
	}
	for _, p := range nodes {
		p.WaitStderr(`"msg":"serving"`, 20*time.Second)
	}
	return nodes
}

func stopNodes(t *testing.T, nodes []*clitest.Proc) {
	t.Helper()
	for _, p := range nodes {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range nodes {
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, p.Stderr())
		}
	}
}

// TestRuntimeJobsCLISQLite: two serve nodes on one SQLite file apply what
// tasklock jobs create, update and delete do.
func TestRuntimeJobsCLISQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "ledger.db")
	requireCatalog(t, url)
	out := filepath.Join(dir, "out")
	nodes := startNodes(t, 2, writeConfig(t, dir, clockConfig(url)), out)
	runtimeJobsScenario(t, &cliClient{store: url, dir: dir}, nodes, out)
	stopNodes(t, nodes)
}

// TestRuntimeJobsRedis: a job created with the CLI on Redis is applied by
// both nodes and runs once a tick. Their file has no job (jobs: []): a
// fleet may define every job at run time.
func TestRuntimeJobsRedis(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	requireCatalog(t, url)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	nodes := startNodes(t, 2, writeConfig(t, dir, "store: "+url+"\njobs: []\n"), out)
	c := &cliClient{store: url, dir: dir}
	c.create(t, jobSnippet("beat", "@every 1s", "beat", 0))
	took := waitApplied(t, nodes, "beat", 1, changedAt(t, c, "beat"))
	t.Logf("create applied by both nodes %v after it was written", took)
	if took > time.Second {
		t.Errorf("create took %v to reach every node, want a second at most", took)
	}
	clitest.WaitFor(t, 20*time.Second, func() bool { return len(linesOf(readOut(t, out), "beat")) >= 3 }, "3 runs of beat")
	seen := map[int64]bool{}
	for _, l := range linesOf(readOut(t, out), "beat") {
		if seen[l.tick] {
			t.Errorf("tick %d ran twice", l.tick)
		}
		seen[l.tick] = true
	}
	stopNodes(t, nodes)
}
