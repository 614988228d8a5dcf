package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The SQL targets: issue 3, item 6.
const (
	p1SQLVsFloor  = 0.9 // tasklock pairs/s ÷ the raw upsert floor's, at least
	p1SQLVsPglock = 1.5 // tasklock ÷ pglock: "well ahead" (pglock was 0.48× the floor when the target was set)
	p3SQLMaxP50   = 5 * time.Millisecond
	// MariaDB: tasklock against go-mysql-lock, pairs/s (P1-sql, 16
	// goroutines) and handoff acquisitions/s (issue 16, item 3).
	sqlVsGoMySQLLock = 1.0
)

// sqlHandoffContenders is the handoff rows' number of contenders, each
// with clients of its own on one key.
const sqlHandoffContenders = 8

const (
	// One round trip per renewal batch: with every lease due together, one
	// per renewal cycle. Pass when it is 1.0 to one decimal.
	p4SQLMaxPerCycle = 1.05
)

// describe says what the store's server is and how it runs.
func (e *sqlEnv) describe() string {
	switch e.kind {
	case kindPG:
		return "PostgreSQL " + e.version + ", private, loopback, fsync off"
	case kindMySQL:
		return "MariaDB " + e.version + ", private, loopback, redo log synced once a second, no binary log"
	default:
		return "SQLite " + e.version + " (modernc.org/sqlite, in lockbench's process), WAL, synchronous NORMAL, temporary file"
	}
}

func (r *report) writeSQL(p func(string, ...any)) {
	if len(r.sqlEnvs) == 0 {
		return
	}
	p("")
	p("### SQL stores")
	p("")
	p("Every implementation runs in the same process against the same server in the same run, each on a pool of its own of %d connections (pgx for PostgreSQL, except pglock which is written for lib/pq; go-sql-driver/mysql with interpolateParams; modernc.org/sqlite with sqlitestore's pragmas), with a lease of %v. "+
		"Statements: what the client library hands to its driver (a pgx QueryTracer; a counting database/sql connector), pings and transaction commands included. Round trips: the requests on the wire (a counting net.Conn: each write after a read).",
		sqlPoolSize, benchTTL)
	for _, e := range r.sqlEnvs {
		if e.err != nil {
			p("")
			p("**%s not run**: %v", e.title, e.err)
		}
	}
	r.writeP1SQL(p)
	r.writeP3SQL(p)
	r.writeP4SQL(p)
	r.writeP5SQL(p)
}

func (r *report) writeP1SQL(p func(string, ...any)) {
	for _, s := range r.p1sql {
		e := s.env
		p("")
		p("#### P1-sql — %s: %s, distinct keys, Obtain+Release pairs/s", e.title, plural(s.goroutines, "goroutine"))
		if s.err != nil {
			p("")
			p("**not run**: %v", s.err)
			continue
		}
		floor := s.res[0]
		p("")
		p("%s of %v per implementation, taking turns; pairs/s: median of the slices; \"vs floor\": median over the cycles of the ratio of the slices of one cycle. Statements and round trips per pair, and CPU time per pair of lockbench (client) and of the server, inside the slices.",
			plural(len(floor.slices), "slice"), min(p1Slice, r.cfg.sqlDuration))
		p("")
		p("| implementation | pairs/s | slices min–max | vs floor | statements/pair | round trips/pair | CPU µs/pair client + server | target | result |")
		p("|---|--:|--:|--:|--:|--:|--:|---|---|")
		var tl *p1Result
		for i, res := range s.res {
			c := s.conts[i]
			vs := pairedRatio(res, floor)
			target, result := "", ""
			if c.role == roleTasklock {
				tl = res
				target = fmt.Sprintf("≥ %.2f× floor", p1SQLVsFloor)
				result = r.target("P1-sql", fmt.Sprintf("%s, %s: tasklock %s", e.title, plural(s.goroutines, "goroutine"), target), fmt.Sprintf("%.2f× floor", vs), vs >= p1SQLVsFloor)
			}
			name := res.name
			if res.errs > 0 {
				name += fmt.Sprintf(" (%d failed pairs: %v)", res.errs, res.err)
			}
			st, tr := res.perPair()
			trips := "—"
			if res.network {
				trips = fmt.Sprintf("%.2f", tr)
			}
			cpu := "—"
			if cl, sv := res.cpuPerPair(); cl > 0 {
				if e.srv == nil {
					cpu = fmt.Sprintf("%.1f (in-process)", cl)
				} else {
					cpu = fmt.Sprintf("%.1f + %.1f = %.1f", cl, sv, cl+sv)
				}
			}
			spread := "—"
			if len(res.slices) > 0 {
				spread = thousands(slices.Min(res.slices)) + "–" + thousands(slices.Max(res.slices))
			}
			p("| %s | %s | %s | %.2f× | %.2f | %s | %s | %s | %s |", name, thousands(res.median()), spread, vs, st, trips, cpu, target, result)
		}
		for i, res := range s.res {
			c := s.conts[i]
			if tl == nil || (c.role != rolePeer && c.role != roleAlgo) {
				continue
			}
			vs := pairedRatio(tl, res)
			target, result := "", ""
			switch {
			case s.goroutines == 1:
			case c.name == pglockName:
				target = fmt.Sprintf("≥ %.2f× pglock", p1SQLVsPglock)
				result = r.target("P1-sql", e.title+": tasklock "+target, fmt.Sprintf("%.2f× pglock", vs), vs >= p1SQLVsPglock)
			case c.name == goMySQLLockName:
				target = fmt.Sprintf("≥ %.2f× go-mysql-lock", sqlVsGoMySQLLock)
				result = r.target("P1-sql", e.title+": tasklock "+target, fmt.Sprintf("%.2f× go-mysql-lock", vs), vs >= sqlVsGoMySQLLock)
			}
			p("| tasklock ÷ %s | | | %.2f× | | | | %s | %s |", c.name, vs, target, result)
		}
		p("")
		for i, c := range s.conts {
			p("- %s: %s.", s.res[i].name, c.note)
		}
	}
}

func (r *report) writeP3SQL(p func(string, ...any)) {
	if len(r.p3sql) > 0 {
		p("")
		p("#### P3-sql — %d goroutines on one key, blocking obtain → release (samples pooled over %d runs)", r.cfg.sqlGoroutines, r.cfg.sqlP3Rounds)
		p("")
		p("As P3: handoff from just before Release to the return of the next holder's blocking obtain; \"to another\" only where the next holder is another goroutine; statements per acquisition count the release and every attempt that found the key held (LISTEN connections' waits not counted). Target on PostgreSQL: tasklock's handoff p50 ≤ %v (waiters woken by LISTEN/NOTIFY).", p3SQLMaxP50)
		r.writeP3SQLTable(p, r.p3sql)
	}
	if len(r.handoffSQL) > 0 {
		p("")
		p("#### P3-sql handoff — %d contenders with clients of their own on one key, blocking obtain → release (samples pooled over %d runs)", sqlHandoffContenders, r.cfg.sqlP3Rounds)
		p("")
		p("As above, each contender with its own Locker and pool (tasklock), Client (pglock) or pool (go-mysql-lock), as %d processes would. \"To another: share\" is the share of acquisitions that go to a waiter (the rest: the goroutine that released takes the key back). Target on MariaDB: tasklock's acquisitions/s ≥ %.2f× go-mysql-lock's.", sqlHandoffContenders, sqlVsGoMySQLLock)
		r.writeP3SQLTable(p, r.handoffSQL)
	}
}

// writeP3SQLTable writes the table of P3-sql results rs, one block of rows
// per store, with their targets.
func (r *report) writeP3SQLTable(p func(string, ...any), rs []*sqlP3Result) {
	p("")
	p("| store | implementation | acquisitions/s | handoff p50 | handoff p99 | to another: share | p50 | p99 | wait p50 | wait p99 | per goroutine | statements | gave up | target | result |")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
	var notes []string
	for _, s := range rs {
		e := s.env
		if s.err != nil {
			p("| %s | **not run**: %v | | | | | | | | | | | | | |", e.title, s.err)
			continue
		}
		for i, res := range s.res {
			c := s.conts[i]
			p50 := percentile(res.handoffs, 0.50)
			share := 0.0
			if len(res.handoffs) > 0 {
				share = float64(len(res.toOther)) / float64(len(res.handoffs))
			}
			target, result := "", ""
			if c.role == roleTasklock && e.kind == kindPG && !s.own {
				target = fmt.Sprintf("p50 ≤ %v", p3SQLMaxP50)
				result = r.target("P3-sql", e.title+": tasklock handoff "+target, dur(p50), len(res.handoffs) > 0 && p50 <= p3SQLMaxP50)
			}
			name := res.name
			if res.errs > 0 {
				name += fmt.Sprintf(" (%d errors: %v)", res.errs, res.err)
			}
			lo, hi := 0, 0
			if len(res.perG) > 0 {
				lo, hi = slices.Min(res.perG), slices.Max(res.perG)
			}
			p("| %s | %s | %s | %s | %s | %.1f%% | %s | %s | %s | %s | %s–%s | %.1f | %d | %s | %s |", e.title, name, thousands(res.rate()),
				dur(p50), dur(percentile(res.handoffs, 0.99)), 100*share, dur(percentile(res.toOther, 0.50)), dur(percentile(res.toOther, 0.99)),
				dur(percentile(res.waits, 0.50)), dur(percentile(res.waits, 0.99)), thousands(float64(lo)), thousands(float64(hi)),
				res.callsPerAcq(), res.giveUps, target, result)
			notes = append(notes, fmt.Sprintf("- %s, %s: %s.", e.title, res.name, c.note))
		}
		r.writeP3SQLRatios(p, s)
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
}

func (r *report) writeP4SQL(p func(string, ...any)) {
	if len(r.p4sql) == 0 {
		return
	}
	n := r.cfg.sqlP4Locks
	p("")
	p("#### P4-sql — keep %s locks alive (TTL %v; renewal, heartbeat or ping every TTL/3)", thousands(float64(n)), r.cfg.sqlP4TTL)
	p("")
	p("Obtained by 16 goroutines; after one renewal cycle, counted over two cycles' time. A cycle is one renewal of every held lock, counted as the implementation renews: tasklock's EventRenewed, pglock's heartbeat UPDATEs, go-mysql-lock's pings. Goroutines: the largest rise over the baseline while holding, and what is left once every lock is released and the client closed. Heap and stack per held lock: after GC, over the baseline taken with the caller's pool connections open (median of the samples). Targets (tasklock): one round trip per renewal batch, i.e. ≤ 1 per cycle with all leases due together (DESIGN P4); O(1) goroutines (≤ %d); ≤ %.0f B heap per held lock; no lock lost.",
		p4MaxGoroutine, p4MaxHeap)
	p("")
	p("| store | implementation | statements per cycle | round trips per cycle | statements per lock per cycle | goroutines while holding | goroutines left after | heap per lock | stack per lock | lost | targets | result |")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
	var notes []string
	for _, s := range r.p4sql {
		e := s.env
		for _, res := range s.res {
			if res.err != nil {
				p("| %s | %s: **failed**: %v | | | | | | | | | | |", e.title, res.name, res.err)
				continue
			}
			st, tr := res.perCycle()
			trips := "—"
			if res.network {
				trips = fmt.Sprintf("%.1f", tr)
			}
			perLock := 0.0
			if res.cycles > 0 {
				perLock = float64(res.counts.stmts) / res.cycles / float64(res.locks)
			}
			targets, result := "", ""
			if res.role == roleTasklock {
				rt := st
				if res.network {
					rt = max(st, tr)
				}
				ok := []bool{
					r.target("P4-sql", e.title+": ≤ 1 round trip per renewal cycle for "+thousands(float64(n))+" leases", fmt.Sprintf("%.2f", rt), res.cycles > 0 && rt <= p4SQLMaxPerCycle) == "PASS",
					r.target("P4-sql", e.title+": O(1) goroutines", fmt.Sprintf("%+d", res.goroutineDelta), res.goroutineDelta <= p4MaxGoroutine) == "PASS",
					r.target("P4-sql", e.title+fmt.Sprintf(": ≤ %.0f B heap per held lock", p4MaxHeap), fmt.Sprintf("%.0f B", res.heapPerLock), res.heapPerLock <= p4MaxHeap) == "PASS",
					r.target("P4-sql", e.title+": no lock lost", strconv.FormatInt(res.lost, 10), res.lost == 0) == "PASS",
				}
				targets = fmt.Sprintf("≤ 1 per cycle; ≤ %d goroutines; ≤ %.0f B; 0 lost", p4MaxGoroutine, p4MaxHeap)
				result = "PASS"
				if slices.Contains(ok, false) {
					result = "**FAIL**"
				}
			}
			p("| %s | %s | %s | %s | %.3f | %+d | %+d | %.0f B | %.0f B | %d | %s | %s |", e.title, res.name, fmt.Sprintf("%.1f", st), trips, perLock,
				res.goroutineDelta, res.goroutinesLeft, res.heapPerLock, res.stackPerLock, res.lost, targets, result)
			failedRel := ""
			if res.releaseFailed > 0 {
				failedRel = fmt.Sprintf(" **%d releases failed** (first: %v).", res.releaseFailed, res.releaseErr)
			}
			samples := make([]string, len(res.heapSamples))
			for i, v := range res.heapSamples {
				samples[i] = strconv.Itoa(int(v))
			}
			notes = append(notes, fmt.Sprintf("- %s, %s: %s. Obtained in %v; counted over %v: %s %s = %.2f cycles, %s statements (%s UPDATEs, %s pings), %s round trips. Heap samples %s B.%s",
				e.title, res.name, res.note, res.obtainTime.Round(time.Millisecond), res.window.Round(time.Millisecond),
				thousands(float64(res.renewals)), res.renewal, res.cycles, thousands(float64(res.counts.stmts)), thousands(float64(res.counts.updates)),
				thousands(float64(res.counts.pings)), tripsText(res), strings.Join(samples, ", "), failedRel))
		}
		p("| %s | %s (computed, not measured) | %s | %s | 1.00 | — | — | — | — | — | | |", e.title, shedLockName, thousands(float64(n)), thousands(float64(n)))
	}
	p("")
	for _, s := range notes {
		p("%s", s)
	}
	p("- %s: ShedLock renews nothing by itself; its KeepAliveLockProvider extends each lock with one UPDATE … SET lock_until = now + lockAtMostFor WHERE name = ? AND locked_by = ? AND lock_until > now, scheduled per lock: %s statements per cycle for %s locks. Computed from its algorithm, not measured.",
		shedLockName, thousands(float64(n)), thousands(float64(n)))
}

func tripsText(res *p4SQLResult) string {
	if !res.network {
		return "no network (in-process)"
	}
	return thousands(float64(res.counts.trips))
}

// plural returns "1 slice", "6 slices".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// writeP3SQLRatios writes the rows of s's tasklock rates over its peer's,
// with the target against go-mysql-lock in the handoff rows.
func (r *report) writeP3SQLRatios(p func(string, ...any), s *sqlP3Result) {
	var tl *p3Result
	for i, c := range s.conts {
		if c.role == roleTasklock {
			tl = s.res[i]
		}
	}
	if tl == nil {
		return
	}
	for i, c := range s.conts {
		peer := s.res[i]
		if c.role != rolePeer || peer.rate() <= 0 {
			continue
		}
		vs := tl.rate() / peer.rate()
		target, result := "", ""
		if s.own && c.name == goMySQLLockName {
			target = fmt.Sprintf("≥ %.2f× go-mysql-lock", sqlVsGoMySQLLock)
			result = r.target("P3-sql", fmt.Sprintf("%s: tasklock handoff, %d contenders, acquisitions/s %s", s.env.title, s.n, target), fmt.Sprintf("%.2f× go-mysql-lock", vs), vs >= sqlVsGoMySQLLock)
		}
		p("| %s | tasklock ÷ %s | %.2f× | | | | | | | | | | | %s | %s |", s.env.title, c.name, vs, target, result)
	}
}
