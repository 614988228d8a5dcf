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
// missing CSRF token, 404 unknown job or lock not held, 429 too many failed
// credentials, 501 the store cannot do it, 503 the store failed). Times are RFC 3339 in UTC. Lists are
// paginated: pass the previous answer's "next" back (as after= or
// before=) until it is "".
//
//	GET  /healthz         "ok": liveness, no credentials, no data, no store call
//	GET  /api/info        {"node", "version", "store" (password redacted), "read_only" (no token),
//	                      "public_read", "logged_in", "csrf" (with a session cookie),
//	                      "can": {"ledger", "list", "release"},
//	                      "build": {"version", "revision", "time", "modified", "go_version"}}
//	GET  /api/jobs        ?q=SUBSTRING &name=EXACT &after=NAME &limit=N (default 100, max 1000)
//	                      {"jobs": [{"job", "state" (ok, paused, broken), "broken" (why),
//	                      "paused", "pending_triggers": [{"id", "at"}], "spec", "since", "last_run",
//	                      "configured", "schedule", "timezone", "next_ticks": [3 times],
//	                      "running": [{"node", "fence", "expires_in_ms", "held_for_ms"}],
//	                      "after": [parents], "children": [jobs whose after names it]
//	                      (both omitted when empty)}],
//	                      "total", "next"}
//	GET  /api/runs        ?job= &status=ok|failed|timeout|lost|cancelled|interrupted|skipped|missed|running
//	                      &from=TIME &to=TIME
//	                      &limit=N (default 50) &before=CURSOR
//	                      {"runs": [{"job", "tick", "trigger", "shard", "shards", "tick_status",
//	                      "attempt", "node", "fence", "start", "end", "status", "error", "output",
//	                      "recorded"}], "next": CURSOR}
//	GET  /api/locks       ?prefix= &after=KEY &limit=N
//	                      {"locks": [{"key", "owner", "fence", "expires_in_ms", "held_for_ms"}], "total", "next"}
//	GET  /api/nodes       {"nodes": [{"node", "alive", "last_seen", "version", "fence", "expires_in_ms", "leader", "leader_term"}],
//	                       "leader": {"node", "term", "expires_in_ms"} or null}
//	GET  /api/events      text/event-stream: an event "summary" every second (see below)
//	POST /api/jobs/{name}/trigger   body: none, or {"note": TEXT} (at most 1000 bytes, 400
//	                      beyond), kept in the audit entry; {"job": state after, "trigger": ID, "note"}
//	POST /api/runs/cancel body {"job", "tick", "trigger", "shard"}: a run as /api/runs lists
//	                      it (its attempt is ignored); asks the node running it to stop it
//	                      within a poll interval (it ends "cancelled", a command's process
//	                      tree stopped as on timeout, no retry); 202 {"cancel": request ID,
//	                      "run": its running attempt}; 404 no such run; 409 {"error", "run"}
//	                      when its newest attempt has ended
//	POST /api/runs/retry  the same body: runs a failed, timeout, lost, interrupted or
//	                      cancelled run again — a scheduled tick as its next attempt (a re-run,
//	                      as jobs rerun; for a sharded job every shard of the tick), a
//	                      triggered run as a new trigger; 202 {"job", "rerun": ID, "tick"} or
//	                      {"job", "trigger": ID}; 404 no such run; 409 running or not failed
//	POST /api/jobs/{name}/pause     {"job": state after}
//	POST /api/jobs/{name}/resume    {"job": state after}
//	POST /api/jobs        body: one job, YAML or JSON, with the keys of a job of serve's
//	                      configuration file (Options.DefineJob checks it); 201
//	                      {"job", "op", "version", "changed", "detail"}; 409 when it is
//	                      defined already or is a job of the configuration file
//	PUT  /api/jobs/{name} the same body (name: may be left out): replaces the job's
//	                      definition; 404 when it was not defined at run time
//	DELETE /api/jobs/{name}?cancel=1   deletes it: its runs in progress finish, or
//	                      with cancel=1 are cancelled
//	GET  /api/audit       ?job= &limit=N (default 50) &before=SEQ
//	                      {"audit": [{"seq", "at", "who", "job", "action", "detail"}], "next": SEQ}
//	POST /api/locks/{key}/release   {"released": KEY}; 404 when not held (escape a / in KEY as %2F)
//	POST /login           form field token=...: starts a session, sets its cookie; {"csrf": ...}
//	POST /logout          ends the session (server-side) and clears the cookie
//
// POST, PUT and DELETE /api/jobs change the jobs defined at run time (kept
// in the store's ledger.Catalog; 501 when it keeps none or
// Options.DefineJob is unset), and trigger, pause and resume append to
// the same audit: every one of these calls needs the token, as the other
// POSTs do, and its audit entry says who: "api:token" for the bearer
// token, "api:session:" and a hash of the session id for a login.
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
// time); null when the job has none. A sharded job's records ("shards" > 1)
// are one per shard-run ("shard" 0 to shards-1), and carry "tick_status",
// the tick's overall status (schedule.TickStatus: ok when every shard is
// ok, running while any runs, else the worst) from the records of that
// tick on the same page (for "last_run", among the recent runs). A job is "broken" when its schedule
// (the configured one, or else the one the fleet registered, "spec") gives
// no next tick; its nodes do not run it. The jobs are the configured ones
// and those the ledger knows (Ledger.Jobs: registered, paused or
// triggered). /api/jobs reads the store with one Jobs, one Leases and one
// Runs call, plus at most one small Runs call
// per job on the page, whatever the number of jobs and the length of the
// history.
//
// A node is live while it holds its node lock, NodeKeyPrefix + name
// (`tasklock serve` takes serve/node/NODE for as long as it runs). Its owner
// name is "NODE tasklock/VERSION" (see NodeOwner), which is where "version"
// comes from. A live node's "last_seen" is its node lock's last renewal:
// Options.NodeLeaseTTL less the lease's remaining time. Nodes seen in
// recent runs, or seen live by this dashboard before, but holding no node
// lock now — stopped, or killed, within their lease's TTL — are listed with
// alive false and as "last_seen" the later of their last renewal this
// dashboard saw and the latest run that shows them alive (the end of a run
// they recorded, the start of a running or interrupted one).
//
// The fleet's leader is the holder of the lease of Options.LeaderKey (the
// election of tasklock.Election; `tasklock serve` campaigns on
// serve/leader): "leader" names it by its owner name — serve's node name —
// with its term (the lease's fence) and the lease's remaining time, and
// the node of that name has "leader": true and "leader_term". A leader
// that was killed stays listed until its lease ends (at most its TTL);
// then "leader" is null until another node is elected.
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
// Without Options.Token the dashboard is read-only and open: anyone who
// reaches it reads everything, and every POST answers 403 (the pages say
// it was started without --token).
//
// With a token, every endpoint but /healthz needs credentials, reading as
// well as acting, since run output and errors can hold secrets: either the
// header "Authorization: Bearer TOKEN" (scripts; the scheme name is
// case-insensitive), or the session cookie of a login. An anonymous API
// call gets 401 with WWW-Authenticate; an anonymous browser gets a login
// page (401) in place of the dashboard. A POST with the session cookie
// must also carry the session's CSRF token, in the X-CSRF-Token header or
// the csrf form field. Options.PublicRead opens the pages and the GET API
// to anonymous callers again; acting still needs the token.
//
// Each login starts a session: a random 128-bit id (the cookie) and a
// random CSRF token, kept server-side for 12 hours. The cookie is
// HttpOnly, SameSite=Strict, Secure over TLS and scoped to the dashboard's
// path; the CSRF token is handed out by POST /login and by GET /api/info
// to a caller that has the cookie, which another site's page cannot read.
// POST /logout deletes the session, so a copy of its cookie and CSRF token
// is dead from then on. Sessions live in this process's memory: a restart
// logs everyone out. They are not kept in the store because the store
// interface (driver.Store and its optional capabilities) has no place for
// them; a login costs one POST.
//
// Failed credentials are limited per client address (an IPv6 address by
// its /64): ten failed logins or bearer tokens, then one more every six
// seconds; past that every login and bearer call from the address is
// answered 429 with Retry-After, even with the right token, until the
// allowance refills. Successes cost nothing, and sessions already open
// are not limited. The address is the connection's peer: behind a reverse
// proxy every client shares the proxy's, so one guesser slows everyone's
// logins there. Tokens are compared in constant time.
//
// The token and the cookie cross the network in clear over plain HTTP:
// off loopback, serve the dashboard behind TLS (`tasklock serve` refuses a
// non-loopback --http without --token unless --insecure, and allows it
// with a token).
//
// No page, answer or event contains a store password: the store URL goes
// through redact.URL, and the text of store errors, in answers and in the
// events of /api/events alike, through redact.Text.
package dashboard
