package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The targets of this part (issue 13, item 8).
const (
	// failover-*: kill → follower elected, at most the TTL (etcd: the
	// session TTL) plus this.
	failoverSlack = 100 * time.Millisecond
)

func (r *kindsReport) target(id, target, measured string, ok bool) string {
	return r.summary.add(id, target, measured, ok)
}

// write prints the part's section of the report, with its own targets
// table; nothing when the part did not run.
func (r *kindsReport) write(w io.Writer) {
	if r == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("### Lock kinds: semaphores, leader failover, renewal of permits")
	p("")
	mode := runMode(r.quick)
	p("Private servers on loopback, started for this part and stopped when it is done: %s; %s. %s of this part: %v in all.",
		r.env.describe(), depVersions("go.etcd.io/etcd/client/v3", "github.com/redis/go-redis/v9", "github.com/jackc/pgx/v5"), mode, r.elapsed.Round(time.Second))
	for _, name := range []string{"redis", "postgres", "etcd"} {
		if err := r.env.errs[name]; err != nil {
			p("")
			p("**%s not started**: %v", name, err)
		}
	}
	r.writeSem(p)
	r.writeFailover(p)
	r.writePermits(p)
	r.summary.write(p, "#### Targets: lock kinds")
}

func (r *kindsReport) writeSem(p func(string, ...any)) {
	if len(r.sem) == 0 {
		return
	}
	pr := r.params
	p("")
	p("#### sem-redis, sem-etcd: %d goroutines on one semaphore of %d permits, Acquire+Release pairs/s", pr.goroutines, semPermits)
	p("")
	p("Every goroutine loops a blocking acquire of a permit and its release, all on one key with %d permits: %d goroutines wait at any moment, so a pair pays for waiting and being woken, not only for the two calls. tasklock and the peer take turns in slices of %v (AB BA …), %d each; pairs/s: the median of the slices; tasklock ÷ peer: the median over the cycles of the ratio of the two slices of one cycle. Requests per pair over the whole run (warm-ups included); allocations per pair: the process's heap allocations inside the slices (the library's own goroutines and the client's included); CPU time per pair inside the slices, of lockbench (client) and of the server. Both ask for a 10 s lease. No target: the numbers are for comparison.",
		semPermits, pr.goroutines-semPermits, p1Slice, pr.slices)
	p("")
	p("| store | implementation | pairs/s | slices min–max | requests/pair | allocs/pair | CPU µs/pair client + server | tasklock ÷ peer |")
	p("|---|---|--:|--:|--:|--:|--:|--:|")
	var notes []string
	for _, s := range r.sem {
		if s.err != nil {
			p("| %s | **not run**: %v | | | | | | |", s.store, s.err)
			continue
		}
		var tl, peer *p1Result
		for i, x := range s.res {
			im := s.impls[i]
			if im.role == coordTasklock {
				tl = x
			} else {
				peer = x
			}
			name, spread, cpu := sliceCells(x)
			perPair, by := s.reqs[i].perPair(s.pairs[i])
			allocs := fmt.Sprintf("%.1f", x.allocsPerPair())
			if x.allocsPerPair() >= 100 {
				allocs = thousands(x.allocsPerPair())
			}
			p("| %s | %s | %s | %s | %.2f | %s | %s | |", s.store, name, thousands(x.median()), spread, perPair, allocs, cpu)
			notes = append(notes, fmt.Sprintf("- %s, %s: %s. Requests per pair: %s.", s.store, x.name, im.note, by))
		}
		if tl != nil && peer != nil {
			p("| %s | tasklock ÷ %s | | | | | | %.2f× |", s.store, peer.name, pairedRatio(tl, peer))
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
}

func (r *kindsReport) writeFailover(p func(string, ...any)) {
	f := r.fail
	if f == nil || len(f.stores) == 0 {
		return
	}
	p("")
	p("#### failover-redis, failover-postgres, failover-etcd: the leader SIGKILLed, kill → follower elected (TTL %v)", f.ttl)
	p("")
	p("A leader process (lockbench started again in a helper role) campaigns and wins every election measured, each on a key of its own, and keeps leading (renewing every TTL/3); the follower, in lockbench's process, campaigns on each and waits; after 0.2 s plus a random part of one renewal cycle (so that the kill lands anywhere in the leader's cycle), the leader is SIGKILLed, and each follower measures from just before the kill to its Campaign's return. %d kills, one leader process each; min, median and max over them. The leadership's TTL is %v (tasklock's ObtainOptions.TTL; on etcd also etcdstore's SessionTTL and the concurrency.Session's TTL). A dead leader's lease ends between 2/3 TTL and 1 TTL after the kill, depending on when it last renewed. Target: every kill ≤ TTL + %v (the max).",
		f.repeats, f.ttl, failoverSlack)
	p("")
	p("| store | implementation | kills | kill → elected min | median | max | failed | target | result |")
	p("|---|---|--:|--:|--:|--:|--:|---|---|")
	var notes []string
	limit := f.ttl + failoverSlack
	for _, s := range f.stores {
		if s.err != nil {
			p("| %s | %s: **not run**: %v | | | | | | | |", s.store, s.impl, s.err)
			continue
		}
		lo, med, hi := time.Duration(0), time.Duration(0), time.Duration(0)
		if len(s.times) > 0 {
			lo, med, hi = slices.Min(s.times), percentile(s.times, 0.5), slices.Max(s.times)
		}
		target := "≤ " + dur(limit)
		ok := len(s.times) > 0 && len(s.errs) == 0 && hi <= limit
		id := strings.ToLower(s.id)
		result := r.target(id, fmt.Sprintf("%s: kill → follower elected ≤ TTL + %v (%s)", s.impl, failoverSlack, dur(limit)),
			fmt.Sprintf("max %s (median %s, %d kills)", dur(hi), dur(med), len(s.times)), ok)
		p("| %s | %s | %d | %s | %s | %s | %d | %s | %s |", s.store, s.impl, len(s.times), dur(lo), dur(med), dur(hi), len(s.errs), target, result)
		notes = append(notes, fmt.Sprintf("- %s, %s: %s.", s.store, s.impl, s.note))
		for _, e := range s.errs {
			notes = append(notes, fmt.Sprintf("  - failed kill: %s", e))
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
}

func (r *kindsReport) writePermits(p func(string, ...any)) {
	x := r.permits
	if x == nil {
		return
	}
	p("")
	p("#### P4-permits: keeping semaphore permits alive on Redis (TTL %v), against as many mutexes", x.ttl)
	p("")
	if x.err != nil {
		p("**Not run**: %v", x.err)
		return
	}
	var perm, mtx *permitsHold
	if len(x.holds) == 2 {
		perm, mtx = x.holds[0], x.holds[1]
	}
	n := 0
	if perm != nil {
		n = perm.leases
	}
	p("As P4: one Locker (renewal on, TTL %v) whose go-redis client counts its round trips (a command alone, or a pipeline) holds %s semaphore permits — %s semaphores of 1 permit and %s of %d — obtained by 16 goroutines with Semaphore(key, n).TryAcquire; then, in the same run on the same server, a Locker of its own holds %s mutexes the same way (P4's lock). After one renewal cycle (the first renewal call on the server loads the script), counted over at least two cycles' time (%v), the window opening and closing when no renewal call is under way; a cycle is one renewal of every held lease (leases the store renewed ÷ leases held, counted by a wrapper around the Store's Renew, which also counts the calls). Beside them: the mean time from sending a renewal pipeline to its answer (the client's hook), and redis-server's own count of the commands it ran in the same window (INFO commandstats: the script calls and the commands the scripts ran), per cycle.",
		x.ttl, thousands(float64(n)), thousands(float64(n/2)), thousands(float64((n-n/2)/permitsBig)), permitsBig, thousands(float64(n)),
		2*x.ttl/3)
	p("")
	p("The Locker renews together the leases due within TTL/6 of each other, so the renewal calls per cycle depend on how the leases' renewals are spread over a cycle (here: on how long obtaining them took, and permits are obtained one call each where mutexes are batched); each call is split per 500 leases into script calls sent in one pipeline. Targets: DESIGN P4's ≤ 1 round trip per %d leases per renewal cycle; the same batching as the mutexes: permits' round trips per renewal call no more than the mutexes'; no permit lost.", p4PerLeases)
	p("")
	p("| leases held | round trips per renewal cycle | renewal calls per cycle | round trips per call (commands in them) | a pipeline's answer, mean | cycles in the window | redis-server commands per cycle | lost | target | result |")
	p("|---|--:|--:|--:|--:|--:|---|--:|---|---|")
	for _, h := range x.holds {
		if h.err != nil {
			p("| %s %s: **failed**: %v | | | | | | | | | |", thousands(float64(h.leases)), h.name, h.err)
			continue
		}
		target, result := "", ""
		if h == perm {
			maxRT := float64(h.leases) / p4PerLeases
			target = fmt.Sprintf("≤ %.0f per cycle", maxRT)
			result = r.target("P4-permits", fmt.Sprintf("≤ %.0f round trips per renewal cycle for %s permits (DESIGN P4)", maxRT, thousands(float64(h.leases))),
				fmt.Sprintf("%.2f", h.perCycle()), h.renewed > 0 && h.perCycle() <= maxRT)
			r.target("P4-permits", "no permit lost", fmt.Sprint(h.lost), h.lost == 0)
		}
		perCall := 0.0
		if h.trips > 0 {
			perCall = float64(h.piped+h.trips-h.pipelines) / float64(h.trips)
		}
		cyc := h.cycles
		if cyc == 0 {
			cyc = 1
		}
		p("| %s %s | %.2f | %.2f | %.2f (%.0f) | %s | %.2f | %s: %s | %d | %s | %s |", thousands(float64(h.leases)), h.name, h.perCycle(),
			float64(h.calls)/cyc, h.tripsPerCall(), perCall, dur(h.pipeTime), h.cycles, thousands(h.serverPerCycle()), reqs{byOp: h.server}.describe(1/cyc), h.lost, target, result)
	}
	for _, h := range x.holds {
		if h.err == nil && h.releaseErr != nil {
			p("")
			p("**%s: afterwards %v**", h.name, h.releaseErr)
		}
	}
	if perm != nil && mtx != nil && perm.err == nil && mtx.err == nil {
		p("| permits ÷ mutexes | %s | | %s | | | | | ≤ mutexes' per call | %s |", ratio(perm.perCycle(), mtx.perCycle()), ratio(perm.tripsPerCall(), mtx.tripsPerCall()),
			r.target("P4-permits", "permits renewed in the mutexes' batches: round trips per renewal call ≤ the mutexes'",
				fmt.Sprintf("%.2f vs %.2f", perm.tripsPerCall(), mtx.tripsPerCall()), perm.calls > 0 && perm.tripsPerCall() <= mtx.tripsPerCall()))
		p("")
		p("Obtained in %v (permits: one script call each, as the Locker sends every kind) and %v (mutexes: batched).",
			perm.obtainTime.Round(time.Millisecond), mtx.obtainTime.Round(time.Millisecond))
	}
}
