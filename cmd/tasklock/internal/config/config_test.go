package config

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/schedule"
)

const full = `store: sqlite://./tasklock.db
node: web-1
jobs:
  - name: nightly-report
    schedule: "0 30 2 * * *"
    timezone: Europe/Berlin
    command: ["/usr/local/bin/report", "--all"]
    timeout: 10m
    overlap: skip
    misfire: {policy: catch_up, grace: 30s, window: 2h, max: 4}
    retries: {max: 3, backoff: 10s, backoff_max: 2m}
    jitter: 1s
    lock_ttl: 20s
    kill_grace: 5s
    min_hold: 5s
    max_hold: 1h
    run_on: leader
  - name: ping
    schedule: "@every 1m"
    misfire: skip
    retries: 2
    after: [nightly-report]
    within: 10m
    shards: 4
    http:
      method: POST
      url: https://example.com/hook
      headers: {content-type: application/json, Authorization: "Bearer x"}
      body: '{"a": 1}'
`

func TestParseFull(t *testing.T) {
	f, err := Parse("c.yaml", []byte(full))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{Store: "sqlite://./tasklock.db", StoreGiven: true, Node: "web-1", OutputMax: DefaultOutputMax, Jobs: []Job{
		{
			Job: schedule.Job{
				Name: "nightly-report", Schedule: "0 30 2 * * *", TimeZone: "Europe/Berlin",
				Timeout: 10 * time.Minute, Overlap: schedule.OverlapSkip,
				Misfire: schedule.MisfireCatchUp, MisfireAfter: 30 * time.Second, MisfireWindow: 2 * time.Hour, CatchUpMax: 4,
				Retries: 3, RetryBackoff: 10 * time.Second, RetryBackoffMax: 2 * time.Minute,
				Jitter: time.Second, Lock: tasklock.ObtainOptions{TTL: 20 * time.Second, MinHold: 5 * time.Second, MaxHold: time.Hour, Grace: 5 * time.Second},
				LeaderOnly: true,
			},
			Command: []string{"/usr/local/bin/report", "--all"}, KillGrace: 5 * time.Second, Line: 4,
		},
		{
			Job: schedule.Job{Name: "ping", Schedule: "@every 1m", Misfire: schedule.MisfireSkip, Retries: 2,
				After: []string{"nightly-report"}, Within: 10 * time.Minute, Shards: 4},
			HTTP: &HTTP{Method: "POST", URL: "https://example.com/hook", Body: `{"a": 1}`, Timeout: DefaultHTTPTimeout,
				Headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer x"}},
			Line: 18,
		},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got  %+v\nwant %+v", f, want)
	}

	f, err = Parse("c.yaml", []byte("jobs: [{name: a, schedule: '@daily', command: [true]}]"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Store != DefaultStore || f.StoreGiven || f.Node != "" || f.Jobs[0].KillGrace != DefaultKillGrace {
		t.Errorf("defaults: %+v", f)
	}
}

func TestParseErrors(t *testing.T) {
	job := "jobs:\n  - name: j\n    schedule: '@every 1s'\n    command: [x]\n"
	for _, tt := range []struct {
		name, in string
		want     []string // each a whole message
	}{
		{"duration", job + "    timeout: 10x\n",
			[]string{`c.yaml:5: job "j": timeout: invalid duration "10x" (want e.g. 300ms, 10s, 1h30m)`}},
		{"negative", job + "    jitter: -1s\n", []string{`c.yaml:5: job "j": jitter: -1s is negative`}},
		{"unknown key", job + "    colour: red\n",
			[]string{`c.yaml:5: job "j": colour: unknown key (want name, schedule, timezone, command, kill_grace, http, timeout, overlap, misfire, retries, jitter, lock_ttl, min_hold, max_hold, run_on, after, within, max_concurrent, pool, pool_wait, nodes, shards, notify)`}},
		{"unknown key before the name", "jobs:\n  - colour: red\n    name: j\n    schedule: '@daily'\n    command: [x]\n",
			[]string{`c.yaml:2: job "j": colour: unknown key (want name, schedule, timezone, command, kill_grace, http, timeout, overlap, misfire, retries, jitter, lock_ttl, min_hold, max_hold, run_on, after, within, max_concurrent, pool, pool_wait, nodes, shards, notify)`}},
		{"unknown top key", "stor: mem://\n" + job, []string{`c.yaml:1: stor: unknown key (want store, node, pools, labels, output_max, preferred_nodes, claim_ahead, notify, jobs)`}},
		{"preferred_nodes", "preferred_nodes: sometimes\n" + job, []string{`c.yaml:1: preferred_nodes: want true or false, got "sometimes"`}},
		{"claim_ahead", "claim_ahead: soon\n" + job, []string{`c.yaml:1: claim_ahead: invalid duration "soon" (want e.g. 300ms, 10s, 1h30m)`}},
		{"claim_ahead max", "claim_ahead: 2s\n" + job, []string{`c.yaml:1: claim_ahead: 2s is above the maximum 1s`}},
		{"claim_ahead negative", "claim_ahead: -1s\n" + job, []string{`c.yaml:1: claim_ahead: -1s is negative`}},
		{"claim_ahead and preferred_nodes", "preferred_nodes: true\nclaim_ahead: 500ms\n" + job, []string{`c.yaml:2: claim_ahead: cannot be used with preferred_nodes: true`}},
		{"schedule", "jobs:\n  - name: j\n    schedule: '61 * * * *'\n    command: [x]\n",
			[]string{`c.yaml:3: job "j": schedule: invalid minute field "61" in "61 * * * *": 61 above the maximum 59`}},
		{"zone", job + "    timezone: Mars/Base\n", []string{`c.yaml:5: job "j": timezone: "Mars/Base": unknown time zone Mars/Base`}},
		{"overlap", job + "    overlap: never\n", []string{`c.yaml:5: job "j": overlap: unknown overlap policy "never" (want skip or allow)`}},
		{"misfire", job + "    misfire: {policy: sometimes}\n",
			[]string{`c.yaml:5: job "j": misfire.policy: unknown misfire policy "sometimes" (want once, skip or catch_up)`}},
		{"misfire max", job + "    misfire: {policy: once, max: 3}\n",
			[]string{`c.yaml:5: job "j": misfire.max: applies to policy catch_up only (policy is once)`}},
		{"misfire window", job + "    misfire:\n      grace: 1m\n      window: 30s\n",
			[]string{`c.yaml:7: job "j": misfire.window: 30s is less than misfire.grace 1m0s`}},
		{"retries", job + "    retries: {max: many}\n", []string{`c.yaml:5: job "j": retries.max: want a whole number, got "many"`}},
		{"run_on", job + "    run_on: primary\n", []string{`c.yaml:5: job "j": run_on: "primary" is not one of any (every node may run it, the default) or leader (only the fleet's elected leader runs it)`}},
		{"shards bound", job + "    shards: 2000\n", []string{`c.yaml:5: job "j": shards: 2000 is not within [0, 1024]`}},
		{"shards leader", job + "    shards: 3\n    run_on: leader\n", []string{`c.yaml:5: job "j": shards: set with run_on: leader: a leader-only job runs on one node, shards spread over many`}},
		{"retries bound", job + "    retries: 1000\n", []string{`c.yaml:5: job "j": retries.max: 1000 is not within [0, 100]`}},
		{"holds", job + "    min_hold: 2h\n    max_hold: 1h\n", []string{`c.yaml:5: job "j": min_hold: 2h0m0s is greater than max_hold 1h0m0s`}},
		{"kill grace", job + "    kill_grace: 5s\n",
			[]string{`c.yaml:5: job "j": kill_grace: kill_grace 5s must be less than half of lock_ttl 10s, so that a command that lost its lock is stopped soon after`}},
		{"lock ttl under the default kill grace", job + "    lock_ttl: 10ms\n", // said once, not again as kill_grace
			[]string{`c.yaml:5: job "j": lock_ttl: kill_grace 2s must be less than half of lock_ttl 10ms, so that a command that lost its lock is stopped soon after`}},
		// Each refused once, and no relation told with the default 2s
		// the file did not give (was a third line: "kill_grace 2s must be
		// less than half of lock_ttl 1ms").
		{"refused kill grace and lock ttl", job + "    lock_ttl: 1ms\n    kill_grace: 0s\n",
			[]string{`c.yaml:5: job "j": lock_ttl: 1ms is below the minimum 10ms`, `c.yaml:6: job "j": kill_grace: 0s: want a duration above 0 (omit the key for the default 2s)`}},
		{"max hold under the default kill grace", job + "    lock_ttl: 1h\n    max_hold: 100ms\n", // at max_hold, which the file says
			[]string{`c.yaml:6: job "j": max_hold: 100ms is not more than kill_grace 2s (the default): the command gets SIGTERM kill_grace before max_hold`}},
		{"lock_ttl without a lock", job + "    overlap: allow\n    lock_ttl: 30s\n",
			[]string{`c.yaml:6: job "j": lock_ttl: has no effect: overlap is allow and the job has no pool or max_concurrent, so its runs take no lock (remove lock_ttl, or set overlap: skip)`}},
		{"max hold under kill grace", job + "    lock_ttl: 1h\n    max_hold: 1s\n    kill_grace: 1s\n",
			[]string{`c.yaml:7: job "j": kill_grace: 1s is not less than max_hold 1s`}},
		// A zero that would read as "at once" or "none" is not taken for
		// the default.
		{"kill grace zero", job + "    kill_grace: 0s\n",
			[]string{`c.yaml:5: job "j": kill_grace: 0s: want a duration above 0 (omit the key for the default 2s)`}},
		{"http timeout zero", "jobs:\n  - name: j\n    schedule: '@daily'\n    http: {url: 'http://x/', timeout: 0}\n",
			[]string{`c.yaml:4: job "j": http.timeout: 0s: want a duration above 0 (omit the key for the default 1m0s)`}},
		{"both handlers", job + "    http: {url: 'http://x/'}\n",
			[]string{`c.yaml:5: job "j": http: set together with command (line 4): a job has one of them`}},
		{"no handler", "jobs:\n  - name: j\n    schedule: '@daily'\n",
			[]string{`c.yaml:2: job "j": command: missing: a job needs a command (a list: program and arguments) or an http request`}},
		{"command string", "jobs:\n  - name: j\n    schedule: '@daily'\n    command: ls -l\n",
			[]string{`c.yaml:4: job "j": command: want a list: the program and its arguments, e.g. ["/usr/local/bin/report", "--all"], got a string of 2 words`}},
		{"command string with a secret", "jobs:\n  - name: j\n    schedule: '@daily'\n    command: \"pg_dump --password=hunter2\"\n",
			[]string{`c.yaml:4: job "j": command: want a list: the program and its arguments, e.g. ["/usr/local/bin/report", "--all"], got a string of 2 words`}},
		{"command a number", "jobs:\n  - name: j\n    schedule: '@daily'\n    command: 12\n",
			[]string{`c.yaml:4: job "j": command: want a list: the program and its arguments, e.g. ["/usr/local/bin/report", "--all"], got a number`}},
		{"http url", "jobs:\n  - name: j\n    schedule: '@daily'\n    http: {url: 'ftp://u:hunter2@x/'}\n",
			[]string{`c.yaml:4: job "j": http.url: "ftp://u:xxxxx@x/": want an http:// or https:// URL`}},
		{"header", "jobs:\n  - name: j\n    schedule: '@daily'\n    http:\n      url: http://x/\n      headers: {x-tasklock-job: y}\n",
			[]string{`c.yaml:6: job "j": http.headers.X-Tasklock-Job: reserved: tasklock sets the X-Tasklock-* headers`}},
		// Header values are secret (the dashboard masks them): a mistake
		// around one says what was given, never the value.
		{"headers string", "jobs:\n  - name: j\n    schedule: '@daily'\n    http:\n      url: http://x/\n      headers: \"Bearer hunter2\"\n",
			[]string{`c.yaml:6: job "j": http.headers: want a mapping of header names to values, got a string`}},
		{"headers number", "jobs:\n  - name: j\n    schedule: '@daily'\n    http: {url: 'http://x/', headers: 20230417}\n",
			[]string{`c.yaml:4: job "j": http.headers: want a mapping of header names to values, got a number`}},
		{"header line as a name", "jobs:\n  - name: j\n    schedule: '@daily'\n    http:\n      url: http://x/\n      headers: {\"Authorization: Bearer hunter2\": x, \" Bearer hunter2\": y}\n",
			[]string{
				`c.yaml:6: job "j": http.headers: invalid header name "Authorization…": ':' cannot be in a header name`,
				`c.yaml:6: job "j": http.headers: invalid header name starting with ' ', which cannot be in a header name`,
			}},
		{"header name a list", "jobs:\n  - name: j\n    schedule: '@daily'\n    http:\n      url: http://x/\n      headers: {[a]: x}\n",
			[]string{`c.yaml:6: job "j": http.headers: want a header name, got a list`}},
		{"http a URL", "jobs:\n  - name: j\n    schedule: '@daily'\n    http: 'https://u:hunter2@x/?token=hunter2'\n",
			[]string{`c.yaml:4: job "j": http: want a mapping of method, url, headers, body, timeout, got a string`}},
		{"duplicate", job + "  - name: j\n    schedule: '@daily'\n    command: [y]\n",
			[]string{`c.yaml:5: job "j": name: a job of this name is on line 2 already`}},
		{"repeated key", job + "    command: [y]\n", []string{`c.yaml:5: job "j": command: repeated (first on line 4)`}},
		{"no name", "jobs:\n  - schedule: '@daily'\n    command: [x]\n", []string{`c.yaml:2: jobs[0]: name: missing`}},
		{"store password", "store: redis://u:hunter2@h:1/?bogus=1\n" + job,
			[]string{`c.yaml:1: store: bad store URL redis://u:xxxxx@h:1/?bogus=1: unknown query parameter "bogus" (redis:// accepts: dial_timeout, pool_size, prefix, read_timeout, wait_replicas, wait_timeout, write_timeout)`}},
		{"no jobs", "store: mem://\n", []string{`c.yaml:1: jobs: missing: want a list of jobs`}},
		{"empty", "# nothing\n", []string{`c.yaml: empty: want a mapping with at least jobs`}},
		{"syntax", "jobs:\n  - name: [\n", []string{`c.yaml:2: invalid YAML: did not find expected node content`}},
		// A YAML error names the line it is on, also where the parser
		// names none (the first line, a reader error, an unknown anchor)
		// or the line where the enclosing list starts.
		{"syntax on line 1", "store: mem: x\n" + job, []string{`c.yaml:1: invalid YAML: mapping values are not allowed in this context`}},
		{"control character", job + "    timeout: \"1\x01s\"\n", []string{`c.yaml:5: invalid YAML: control characters are not allowed`}},
		{"unknown anchor", job + "    timeout: *t\n", []string{`c.yaml:5: invalid YAML: unknown anchor 't' referenced`}},
		{"bad indentation", job + "   jitter: 1s\n", []string{`c.yaml:5: invalid YAML: did not find expected '-' indicator`}},
		{"bad escape", job + "    timeout: \"\\q\"\n", []string{`c.yaml:5: invalid YAML: found unknown escape character`}},
		// The two YAML mistakes a newcomer makes first get a hint: an
		// unquoted @every and a tab in the indentation.
		{"unquoted @every", "jobs:\n  - name: j\n    schedule: @every 10s\n    command: [x]\n",
			[]string{`c.yaml:3: invalid YAML: found character that cannot start any token (a value starting with @ or ` + "`" + ` needs quotes: schedule: "@every 10s")`}},
		{"tab indent", "jobs:\n\t- name: j\n", []string{`c.yaml:2: invalid YAML: found character that cannot start any token (YAML indents with spaces, not tabs)`}},
		// Durations have an upper bound, names no control characters.
		{"duration bound", job + "    timeout: 9000h\n", []string{`c.yaml:5: job "j": timeout: 9000h0m0s is above the maximum 8760h0m0s (365 days)`}},
		{"lock_ttl bound", job + "    lock_ttl: 2562047h\n", []string{`c.yaml:5: job "j": lock_ttl: 2562047h0m0s is above the maximum 8760h0m0s (365 days)`}},
		{"node with a newline", "node: \"web-1\\nforged\"\n" + job, []string{`c.yaml:1: node: contains control character \n (U+000A)`}},
		{"node with C1 control", "node: \"web\\u009b1\"\n" + job, []string{`c.yaml:1: node: contains control character \u009b (U+009B)`}},
		// Dependencies: parents are jobs of the file, without cycles.
		{"unknown parent", job + "    after: [j2, nope]\n  - name: j2\n    schedule: '@daily'\n    command: [y]\n",
			[]string{`c.yaml:5: job "j": after: unknown job "nope": no job of this name in the file`}},
		{"cycle", "jobs:\n  - {name: a, schedule: '@daily', command: [x], after: [c]}\n  - {name: b, schedule: '@daily', command: [x], after: a}\n" +
			"  - {name: c, schedule: '@daily', command: [x], after: [d, b]}\n  - {name: d, schedule: '@daily', command: [x]}\n",
			[]string{`c.yaml:2: job "a": after: cycle a -> c -> b -> a: a job cannot wait for itself`}},
		{"self", job + "    after: [j]\n", []string{`c.yaml:5: job "j": after: cycle j -> j: a job cannot wait for itself`}},
		{"parent twice", job + "    after:\n      - j2\n      - j2\n  - name: j2\n    schedule: '@daily'\n    command: [y]\n",
			[]string{`c.yaml:7: job "j": after: "j2" is named twice (first on line 6)`}},
		{"after not a list", job + "    after: {a: b}\n", []string{`c.yaml:5: job "j": after: want a list of job names, got a mapping`}},
		{"within without after", job + "    within: 1m\n", []string{`c.yaml:5: job "j": within: set, and after names no parent to wait for`}},
		{"within above the window", job + "    after: [j2]\n    within: 2h\n  - name: j2\n    schedule: '@daily'\n    command: [y]\n",
			[]string{`c.yaml:6: job "j": within: 2h0m0s is more than misfire.window 1h0m0s: a tick would still wait after every node stopped looking at it`}},
		{"two documents", job + "---\njobs: []\n", []string{`c.yaml:5: a second YAML document: the file must hold one`}},
		{"every mistake", "jobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [x]\n    timeout: 1x\n    jitter: 2y\n  - name: b\n    schedule: nope\n",
			[]string{
				`c.yaml:5: job "a": timeout: invalid duration "1x" (want e.g. 300ms, 10s, 1h30m)`,
				`c.yaml:6: job "a": jitter: invalid duration "2y" (want e.g. 300ms, 10s, 1h30m)`,
				`c.yaml:7: job "b": command: missing: a job needs a command (a list: program and arguments) or an http request`,
				`c.yaml:8: job "b": schedule: invalid spec in "nope": 1 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)`,
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("c.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("no error; got %+v", f)
			}
			if got := AsErrors(err); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("password printed: %v", err)
			}
		})
	}
}

// marshal writes f back as YAML, every field explicit, for FuzzLoadConfig.
func marshal(t *testing.T, f *File) []byte {
	type out = map[string]any
	dur := func(d time.Duration) string { return d.String() }
	var jobs []out
	for _, j := range f.Jobs {
		m := out{
			"name": j.Name, "schedule": j.Schedule, "timezone": j.TimeZone, "timeout": dur(j.Timeout),
			"overlap": j.Overlap.String(), "jitter": dur(j.Jitter), "lock_ttl": dur(j.Lock.TTL),
			"min_hold": dur(j.Lock.MinHold), "max_hold": dur(j.Lock.MaxHold), "run_on": runOn(j.LeaderOnly), "shards": j.Shards,
			"misfire": out{"policy": j.Misfire.String(), "grace": dur(j.MisfireAfter), "window": dur(j.MisfireWindow)},
			"retries": out{"max": j.Retries, "backoff": dur(j.RetryBackoff), "backoff_max": dur(j.RetryBackoffMax)},
			"after":   j.After, "within": dur(j.Within),
		}
		if j.Misfire == schedule.MisfireCatchUp {
			m["misfire"].(out)["max"] = j.CatchUpMax
		}
		if j.MaxConcurrent > 0 {
			m["max_concurrent"] = j.MaxConcurrent
		}
		if j.Pool != "" {
			m["pool"], m["pool_wait"] = j.Pool, dur(j.PoolWait)
		}
		if j.Nodes != nil {
			m["nodes"] = j.Nodes
		}
		if j.HTTP != nil {
			m["http"] = out{"method": j.HTTP.Method, "url": j.HTTP.URL, "headers": j.HTTP.Headers, "body": j.HTTP.Body, "timeout": dur(j.HTTP.Timeout)}
		} else {
			m["command"], m["kill_grace"] = j.Command, dur(j.KillGrace)
		}
		jobs = append(jobs, m)
	}
	doc := out{"jobs": jobs}
	if f.StoreGiven {
		doc["store"] = f.Store
	}
	if f.Node != "" {
		doc["node"] = f.Node
	}
	if f.Pools != nil {
		doc["pools"] = f.Pools
	}
	if f.Labels != nil {
		doc["labels"] = f.Labels
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var located = regexp.MustCompile(`^c\.yaml(:[1-9][0-9]*)?: `)

// FuzzLoadConfig checks that Parse never panics, that every mistake names
// the file, and that it loses nothing: a valid file written back out with
// every field explicit parses to the same File.
func FuzzLoadConfig(f *testing.F) {
	f.Add(full)
	f.Add("jobs: [{name: a, schedule: '@daily', command: [true]}]")
	f.Add("pools: {r: 2}\nlabels: [gpu, zone=eu]\njobs: [{name: a, schedule: '@daily', command: [true], pool: r, pool_wait: 1m, max_concurrent: 3, nodes: [gpu]}]")
	f.Add("store: mem://\nnode: n\njobs:\n  - &j {name: a, schedule: '*/5 * * * *', command: [a, b], retries: 3}\n  - *j\n")
	f.Add("jobs:\n  - {name: x, schedule: 'CRON_TZ=Asia/Tokyo 0 0 * * *', timezone: UTC, http: {url: 'http://h/', headers: {a: b}}}\n")
	f.Add("jobs:\n  - name: y\n    <<: {schedule: '@hourly'}\n")
	f.Add("jobs: [{name: '\\x01', schedule: '@every 0.5s', command: ['']}]")
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := Parse("c.yaml", []byte(in))
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if !located.MatchString(e.Error()) {
					t.Fatalf("mistake does not name the file: %q", e.Error())
				}
			}
			return
		}
		if len(cfg.Jobs) == 0 {
			t.Fatal("valid file without jobs")
		}
		out := marshal(t, cfg)
		again, err := Parse("c.yaml", out)
		if err != nil {
			t.Fatalf("written back:\n%s\ndoes not parse: %v", out, err)
		}
		for i := range cfg.Jobs {
			cfg.Jobs[i].Line, again.Jobs[i].Line = 0, 0
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("lost in the round trip:\n%+v\n%+v\nvia\n%s", cfg, again, out)
		}
	})
}

func runOn(leaderOnly bool) string {
	if leaderOnly {
		return "leader"
	}
	return "any"
}

// A file with an empty list of jobs is valid: every job of the fleet may
// be defined at run time (tasklock jobs create). One with no jobs: key is
// not.
func TestParseNoJobs(t *testing.T) {
	f, err := Parse("c.yaml", []byte("store: sqlite://./t.db\njobs: []\n"))
	if err != nil || len(f.Jobs) != 0 {
		t.Fatalf("jobs: [] = %+v, %v; want a file with no jobs", f, err)
	}
	if _, err := Parse("c.yaml", []byte("store: sqlite://./t.db\n")); err == nil || !strings.Contains(err.Error(), "jobs: missing") {
		t.Fatalf("no jobs: key: %v, want jobs: missing", err)
	}
}
