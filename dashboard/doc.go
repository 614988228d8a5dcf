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
//	GET  /readyz          readiness, no credentials: 200 {"ready": true, "check"} when the
//	                      store answered one cheap call within Options.ReadyTimeout
//	                      (default 2s), else 503 {"ready": false, "check", "reason"}
//	                      (see Readiness below)
//	GET  /api/openapi.json this API as an OpenAPI 3.1 document; no credentials (it is
//	                      the same for every dashboard of a version and holds no data)
//	GET  /api/info        {"node", "version", "store" (password redacted), "read_only" (no token),
//	                      "public_read", "logged_in", "csrf" (with a session cookie),
//	                      "can": {"ledger", "list", "release"},
//	                      "build": {"version", "revision", "time", "modified", "go_version"}}
//	GET  /api/overview    ?window=DURATION (1h to 168h, default 24h) &bucket=DURATION (whole
//	                      minutes, default 1m; at most 1440 buckets in the window)
//	                      {"at", "from", "to", "window_ms", "bucket_ms", "sampled", "sample_note" (when sampled),
//	                      "jobs": {"total", "active", "paused", "broken"},
//	                      "nodes": {"alive"} or null, "locks": {"held", "waiting"} or null,
//	                      "last_hour", "last_day", "window": {"runs": {status: count}, "total",
//	                      "failure_rate" (or null), "p50_ms", "p99_ms" (or null), "lock_losses"},
//	                      "missed": [{"job", "tick"}],
//	                      "buckets": [{"at", "counts": {status: count}, "p50_ms", "p99_ms"}]}
//	GET  /api/jobs        ?q=SUBSTRING &name=EXACT &after=NAME &limit=N (default 100, max 1000)
//	                      &ticks=N (next ticks per job, default 3, max 20)
//	                      &recent=N (1 to 100: adds "recent")
//	                      {"jobs": [{"job", "state" (ok, paused, broken), "broken" (why),
//	                      "paused", "pending_triggers": [{"id", "at"}], "spec", "since", "last_run",
//	                      "configured", "schedule", "timezone", "next_ticks": [N times],
//	                      "definition" (with name=, for a configured job; see below),
//	                      "running": [{"node", "fence", "expires_in_ms", "held_for_ms"}],
//	                      "after": [parents], "children": [jobs whose after names it]
//	                      (both omitted when empty), "recent": [the statuses of its newest N
//	                      runs, newest first] (with recent=N; omitted when none)}],
//	                      "total", "next"}
//	GET  /api/runs        ?job= &status=ok|failed|timeout|lost|cancelled|interrupted|skipped|missed|running
//	                      &from=TIME &to=TIME
//	                      &limit=N (default 50) &before=CURSOR
//	                      {"runs": [{"id", "job", "tick", "trigger", "shard", "shards", "tick_status",
//	                      "attempt", "node", "fence", "start", "end", "status", "error", "output",
//	                      "output_truncated", "recorded"}], "next": CURSOR}
//	                      (an output longer than ListOutputMax is sent as its end, with
//	                      "output_truncated": true; /api/run sends all of it)
//	GET  /api/run         ?id=ID (a run's "id") or ?job= &tick=TIME &trigger= &shard=N &attempt=N
//	                      {"run": one run as above with its whole stored output,
//	                      "attempts": [the other attempts of its tick and shard],
//	                      "lateness_ms" (start − tick), "duration_ms" (null while running),
//	                      "lock": {"key", "fence", "held": lock or null,
//	                      "events": [{"at", "event" (taken, released, lost, expired, held),
//	                      "node", "fence", "note"}]}}; 404 when not stored (pruned)
//	GET  /api/locks       ?prefix= &after=KEY &limit=N
//	                      {"locks": [{"key", "owner", "fence", "expires_in_ms", "held_for_ms"}], "total", "next"}
//	GET  /api/nodes       {"nodes": [{"node", "alive", "last_seen", "version", "fence", "expires_in_ms", "leader", "leader_term"}],
//	                       "leader": {"node", "term", "expires_in_ms"} or null}
//	GET  /api/events      text/event-stream: an event "summary" every second (see below)
//	POST /api/jobs/{name}/trigger   body: none, or {"note": TEXT, "force": BOOL} (a note of
//	                      at most 1000 bytes, 400 beyond), kept in the audit entry; {"job": state
//	                      after, "trigger": ID, "note"}; 409 when the job looks removed from
//	                      every node (see below), unless "force": true or ?force=1
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
//	                      {"job", "trigger": ID}; 404 no such run; 409 running or not failed,
//	                      or its job looks removed from every node (see below), unless the
//	                      body has "force": true or the URL ?force=1
//	POST /api/jobs/{name}/pause     {"job": state after}: as a job of /api/jobs
//	                      (state, paused, pending_triggers, spec, since, last_run)
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
//	GET  /api/notifications  ?job= &limit=N (default 50) &before=SEQ
//	                      the delivery log of tasklock serve's notifications (audit entries
//	                      with action "notify"), one per attempt to one target, newest first:
//	                      {"notifications": [{"seq", "at", "node", "job", "id", "event", "tick",
//	                      "trigger", "shard", "status", "target", "attempt", "code", "error",
//	                      "result" (delivered, retrying, failed), "next_retry"}], "next": SEQ}
//	POST /api/locks/{key}/release   {"released": KEY}; 404 when not held (escape a / in KEY as %2F)
//	POST /login           form field token=...: starts a session, sets its cookie; {"csrf": ...}
//	POST /logout          ends the session (server-side) and clears the cookie
//
// The OpenAPI document (openapi.json in this package, embedded) is the
// contract: every path and method the handler routes is in it (a test
// fails otherwise), and the systest module checks real answers against it.
// An API operation refuses a query parameter the document does not give
// it (400, naming the parameter and those it takes), so that a misspelt
// filter is not answered as if there were none.
//
// POST, PUT and DELETE /api/jobs change the jobs defined at run time (kept
// in the store's ledger.Catalog; 501 when it keeps none or
// Options.DefineJob is unset), and trigger, pause and resume append to
// the same audit: every one of these calls needs the token, as the other
// POSTs do, and its audit entry says who: "api:token" for the bearer
// token, "api:session:" and a hash of the session id for a login.
//
// A trigger or a retry of a job that looks removed from the configuration
// of every node is refused with 409, as `tasklock jobs trigger` refuses
// it (both decide with the same code): its request would wait, pending,
// until a node has the job again. Such a job was deleted at run time and
// has not run since, or it is registered, not paused, its latest record
// is not a run in progress, and the next tick of its registered schedule
// after that record (or after its registration, when it has none) is more
// than a minute past with nothing recorded; the error says what the
// ledger shows. A job of Options.Jobs is never
// refused (the node serving the dashboard has it), nor one no node
// registered; "force": true in the body, or ?force=1, asks anyway.
//
// The job, run, lock and audit objects, the answers of POST, PUT and
// DELETE /api/jobs and of a release have the shapes (package apijson) of
// `tasklock jobs --json` and `tasklock locks --json`, with the fields
// above added to a listed job and lock; openapi.json names them.
//
// A job's "definition" (sent when the request names it, name=) is its
// configured schedule.Job as the configuration file says it, times in
// milliseconds, 0 for the default: {"schedule", "timezone", "timeout_ms",
// "retries", "retry_backoff_ms", "retry_backoff_max_ms", "overlap",
// "misfire", "misfire_after_ms", "misfire_window_ms", "catch_up_max",
// "jitter_ms", "shards", "max_concurrent", "pool", "pool_wait_ms",
// "nodes", "run_on" (any, leader), "after", "within_ms", "lock_ttl_ms",
// "min_hold_ms", "max_hold_ms", "handler": [{"key", "value"}]}, where
// "handler" is what Options.Handler says the job runs (serve: its command,
// or its HTTP method, URL and headers), secrets hidden.
//
// A run's lock in /api/run is the key the run held — KeyPrefix + job, +
// "/shard/N" for a shard-run, + "/running" for a job with MaxConcurrent
// (a semaphore) — with the run's fence, the lease on that key now (any
// holder: a later run's, or none), and the events its record shows: taken
// at the start with the fence, then released, lost (the error says how) or
// expired (the node stopped: interrupted; with no time, as the lock
// expires lock_ttl after the node's last renewal, which no record shows,
// not when the run was found interrupted), or held while it runs. The
// store keeps no log of a lock's events; these are derived from the run
// record.
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
// /api/overview is the landing page's data: the run records whose tick
// is in the window, counted by status per bucket (the stacked bars) and
// summed over the last hour and the last day (whole buckets: a period
// starts at its start truncated to the bucket), with the failure rate
// (failed, timeout, lost and interrupted over those and ok) and the
// lateness of the first attempts (start − tick) as p50 and p99 per bucket
// and per period. The lateness quantiles are estimates from a histogram
// with fixed bounds (ledger.LatenessBounds: 1 ms to 5 min), interpolated
// within a bound; past 5 min they say 5 min. "lock_losses" counts the runs
// that ended lost (their job's lock, or a pool's or max_concurrent's
// permit, was lost while they ran), which the page shows as such: the
// store knows of no other lock losses. The figures
// are aggregated in the store (ledger.Stats: per-minute rollups kept by
// triggers in SQLite and written with each batch of records in Redis, a
// GROUP BY over a covering index of the window in PostgreSQL and MySQL,
// the records in memory in memstore), never by reading the history record
// by record; the minute that holds the window's end counts whole where
// rollups serve it. A store without
// ledger.Stats (etcd, ZooKeeper) answers from at most its 10,000 newest
// records of the window, and says so with "sampled": true and
// "sample_note". "missed" lists the jobs (at most 50) whose newest record
// is a missed tick from the last hour; it reads the store only when the
// last hour counted a missed tick. "jobs" counts the configured jobs and
// those the ledger knows; "nodes" the live node locks; "locks" every
// lease, held or waited for ("null" when the store cannot list them).
// With recent=N, /api/jobs reads the jobs of the page's newest statuses
// in one ledger.Stats.RecentStatuses call (omitted without ledger.Stats).
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
// # Readiness
//
// /healthz says the process serves HTTP; /readyz says it can do its work.
// It makes one store call, "check" naming which: "ledger"
// (Ledger.JobStates, the call each scheduler makes twice a second; on a
// SQL store it reads the ledger's tables, so it fails when the schema
// lacks them — `tasklock serve` migrates it when it starts, unless the URL
// says migrate=false and it fails to start), "locks" (Lister.Leases of the
// node locks, for a store without a ledger) or "none" (a store with
// neither: always ready). A store that fails the call, or does not answer
// within Options.ReadyTimeout, makes it 503 with a "reason" that says which
// of the two, and never the store's error, which can name its hosts and
// users: that is logged at warn level, once per outage, and the recovery
// at info. An answer is reused for a second, so however many callers
// probe, the store gets at most one call a second. Point a load balancer's
// or Kubernetes' readiness probe at /readyz and the liveness probe at
// /healthz: a store outage takes every node out of rotation but restarts
// none of them.
//
// # Access control
//
// Without Options.Token the dashboard is read-only and open: anyone who
// reaches it reads everything, and every POST answers 403 (the pages say
// it was started without --token).
//
// With a token, every endpoint but /healthz, /readyz and /api/openapi.json
// needs credentials, reading as well as acting, since run output and
// errors can hold secrets: either the header "Authorization: Bearer TOKEN"
// (scripts; the scheme name is case-insensitive), or the session cookie of
// a login. An anonymous API
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
