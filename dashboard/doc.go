// Package dashboard is the operator's view of a tasklock store: a JSON API
// and a web UI, as one http.Handler that `tasklock serve --http` serves and
// that any program can mount in its own server:
//
//	h, err := dashboard.New(dashboard.Options{Store: store, Jobs: jobs, Token: os.Getenv("TASKLOCK_TOKEN")})
//	mux.Handle("/tasklock/", http.StripPrefix("/tasklock", h))
//
// The pages are plain HTML, CSS and JavaScript embedded in the binary;
// nothing is fetched from the network. Every link is relative, so any
// prefix works.
//
// # JSON API
//
// Every answer is JSON; an error is {"error": "..."} with a 4xx or 5xx
// status (400 bad parameter, 401 no or wrong credentials, 403 read-only or
// missing CSRF token, 404 unknown job or lock not held, 501 the store
// cannot do it, 503 the store failed). Times are RFC 3339 in UTC. Lists are
// paginated: pass the previous answer's "next" back (as after= or
// before=) until it is "".
//
//	GET  /api/info        {"node", "version", "store" (password redacted), "read_only",
//	                      "logged_in", "csrf" (with a session cookie), "can": {"ledger", "list", "release"},
//	                      "build": {"version", "revision", "time", "modified", "go_version"}}
//	GET  /api/jobs        ?q=SUBSTRING &name=EXACT &after=NAME &limit=N (default 100, max 1000)
//	                      {"jobs": [{"job", "paused", "pending_triggers": [{"id", "at"}], "last_run",
//	                      "configured", "schedule", "timezone", "next_ticks": [3 times],
//	                      "running": [{"node", "fence", "expires_in_ms", "held_for_ms"}]}],
//	                      "total", "next"}
//	GET  /api/runs        ?job= &status=ok|failed|timeout|lost|skipped|missed &from=TIME &to=TIME
//	                      &limit=N (default 50) &before=CURSOR
//	                      {"runs": [{"job", "tick", "trigger", "attempt", "node", "fence", "start",
//	                      "end", "status", "error", "output", "recorded"}], "next": CURSOR}
//	GET  /api/locks       ?prefix= &after=KEY &limit=N
//	                      {"locks": [{"key", "owner", "fence", "expires_in_ms", "held_for_ms"}], "total", "next"}
//	GET  /api/nodes       {"nodes": [{"node", "alive", "last_seen", "version", "fence", "expires_in_ms"}]}
//	GET  /api/events      text/event-stream: an event "summary" every second (see below)
//	POST /api/jobs/{name}/trigger   {"job": state after, "trigger": ID}
//	POST /api/jobs/{name}/pause     {"job": state after}
//	POST /api/jobs/{name}/resume    {"job": state after}
//	POST /api/locks/{key}/release   {"released": KEY}; 404 when not held (escape a / in KEY as %2F)
//	POST /login           form field token=...: sets the session cookie; {"csrf": ...}
//	POST /logout          clears it
//
// The job, run and lock objects have the shapes of `tasklock jobs --json`
// and `tasklock locks --json`, with the fields above added.
//
// A job is "running" while its lock (KeyPrefix + name) is held: "running"
// names the holder (its owner name is the node) and the fence. "held_for_ms"
// counts from when this dashboard first listed that lease, so it is a lower
// bound, null when unknown. "last_run" is the job's newest record: from the
// newest Options.RecentRuns records (one query, at most once a second), or
// for the jobs of the page not among them one indexed query each (16 at a
// time); null when the job has none. /api/jobs reads the store with one
// JobStates, one Leases and one Runs call, plus at most one small Runs call
// per job on the page, whatever the number of jobs and the length of the
// history.
//
// A node is live while it holds its node lock, NodeKeyPrefix + name
// (`tasklock serve` takes serve/node/NODE for as long as it runs). Its owner
// name is "NODE tasklock/VERSION" (see NodeOwner), which is where "version"
// comes from. Nodes seen in recent runs but holding no node lock are listed
// with alive false and the end of their latest run as "last_seen".
//
// /api/events sends, every Options.EventInterval and when it opens,
//
//	event: summary
//	data: {"at", "locks", "running", "nodes_alive", "paused", "pending_triggers",
//	       "latest_run", "fingerprint": {section: hash}, "changed": ["jobs", "runs", "locks", "nodes"]}
//
// where "changed" names the sections that changed since the previous event
// of the stream; the pages fetch again what they show when it is named. The
// store is read once per interval however many streams are open.
//
// # Access control
//
// Without Options.Token the dashboard is read-only: every POST answers 403.
// With one, a POST must carry either the header "Authorization: Bearer
// TOKEN" (scripts), or the session cookie set by POST /login together with
// the session's CSRF token in the X-CSRF-Token header or the csrf form field
// (the pages). The session cookie is HttpOnly, SameSite=Strict, Secure over
// TLS, scoped to the dashboard's path, valid 12 hours, and signed with a
// key that is random per process and bound to the token: a restart or a new
// token ends every session. The CSRF token is derived from the session and
// handed out only by GET /api/info to a caller that has the cookie, which
// another site's page cannot read. Tokens are compared in constant time.
// The GET endpoints need no credentials: put the dashboard on a loopback
// address or behind a proxy that authenticates when that is too much (serve
// refuses a non-loopback --http without --token unless --insecure).
//
// No page, answer or event contains a store password: the store URL goes
// through redact.URL, and the text of store errors, in answers and in the
// events of /api/events alike, through redact.Text.
package dashboard
