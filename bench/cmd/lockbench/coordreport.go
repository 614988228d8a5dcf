package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The targets of this part (issue 4, item 7).
const (
	// P1-<store>: tasklock's pairs/s ÷ the peer's, at least.
	coordP1VsPeer = 1.0
	// P3-redlock: requests per acquisition on RedLock's busiest node ÷
	// those of tasklock on one Redis doing the same, at most.
	coordP3RedlockVsOne = 3.0
	// etcd, ZooKeeper (issue 16): tasklock's pairs/s ÷ the raw floor's,
	// at least, with 16 goroutines and with one; its handoff row's
	// acquisitions/s ÷ the peer's, at least.
	coordVsFloor     = 0.9
	coordHandoffPeer = 1.0
	// P4-etcd, P4-zk: renewal cost independent of the number of locks
	// held. Requests per renewal cycle with the many locks may exceed
	// those with the few by at most this much (less than one request: a
	// request more per cycle is a cost that grew).
	coordP4Slack = 0.5
)

func (r *coordReport) target(id, target, measured string, ok bool) string {
	return r.summary.add(id, target, measured, ok)
}

// write prints the part's section of the report, with its own targets
// table; nothing when the part did not run.
func (r *coordReport) write(w io.Writer) {
	if r == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("### etcd, ZooKeeper and RedLock: tasklock against the Go library users would pick instead")
	p("")
	var servers []string
	for _, res := range r.results {
		if res.env.err == nil {
			servers = append(servers, res.env.describe())
		}
	}
	mode := runMode(r.quick)
	p("Private servers on loopback, started for the run, each store's stopped once it is done: %s; %s. %s of this part: P1 %v per implementation in slices of %v, P3 %d × %v per implementation, taking turns, after a %v warm-up; P4 %s and %s locks of TTL %v; %v in all.",
		strings.Join(servers, "; "), coordDeps(), mode, r.params.duration, min(p1Slice, r.params.duration), r.params.p3Rounds,
		r.params.duration/time.Duration(r.params.p3Rounds), r.params.warmup, thousands(float64(r.params.locks)), thousands(float64(r.params.few)),
		r.params.ttl, r.elapsed.Round(time.Second))
	p("")
	p("Requests: what each implementation's own clients send to the store, counted by a gRPC unary and stream interceptor on etcd (a unary call, or a message sent on a stream: a LeaseKeepAlive, a watch request), by a counting net.Conn (zk.WithDialer) reading the client's packets on ZooKeeper (the session's pings included), and by a go-redis hook per node on RedLock (a command alone or a pipeline). Each gets an answer: they are round trips, though a client may have several under way at once.")
	for _, res := range r.results {
		if res.env.err != nil {
			p("")
			p("**%s not run**: %v", res.env.title, res.env.err)
		}
	}
	r.writeP1(p)
	r.writeP1One(p)
	r.writeP3(p)
	r.writeHandoff(p)
	r.writeP4(p)
	r.summary.write(p, "#### Targets: etcd, ZooKeeper, RedLock")
}

func (r *coordReport) writeP1(p func(string, ...any)) {
	var rows []*coordResult
	for _, res := range r.results {
		if res.p1Run {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return
	}
	p("")
	p("#### P1-etcd, P1-zk, P1-redlock: %d goroutines, distinct keys, Obtain+Release pairs/s", r.params.goroutines)
	p("")
	p("Per store, tasklock and the peer take turns in slices of %v (AB BA …); pairs/s: the median of the slices; tasklock ÷ peer: the median over the cycles of the ratio of the two slices of one cycle. Requests per pair over the whole run (warm-ups included). CPU time per pair inside the slices, of lockbench (client) and of the store's server(s). Target: tasklock ≥ %.2f× the peer.",
		min(p1Slice, r.params.duration), coordP1VsPeer)
	p("")
	p("| store | implementation | pairs/s | slices min–max | requests/pair | CPU µs/pair client + server | target | result |")
	p("|---|---|--:|--:|--:|--:|---|---|")
	var notes []string
	for _, res := range rows {
		e := res.env
		if res.p1Err != nil {
			p("| %s | **not run**: %v | | | | | | |", e.title, res.p1Err)
			continue
		}
		var tl, peer, floor *p1Result
		for i, x := range res.p1 {
			im := res.p1Impls[i]
			switch im.role {
			case coordTasklock:
				tl = x
			case coordFloor:
				floor = x
			default:
				peer = x
			}
			name, spread, cpu := sliceCells(x)
			perPair, by := res.p1Reqs[i].perPair(res.p1Pairs[i])
			p("| %s | %s | %s | %s | %.2f | %s | | |", e.title, name, thousands(x.median()), spread, perPair, cpu)
			notes = append(notes, fmt.Sprintf("- %s, %s: %s. Requests per pair: %s.%s", e.title, x.name, im.p1Note, by, allocsNote(x)))
		}
		if tl != nil && peer != nil {
			vs := pairedRatio(tl, peer)
			target := fmt.Sprintf("≥ %.2f× %s", coordP1VsPeer, peer.name)
			p("| %s | tasklock ÷ %s | %.2f× | | | | %s | %s |", e.title, peer.name, vs, target,
				r.target("P1-"+string(e.kind), "tasklock "+target, fmt.Sprintf("%.2f×", vs), vs >= coordP1VsPeer))
		}
		if tl != nil && floor != nil {
			vs := pairedRatio(tl, floor)
			target := fmt.Sprintf("≥ %.2f× %s", coordVsFloor, floor.name)
			p("| %s | tasklock ÷ %s | %.2f× | | | | %s | %s |", e.title, floor.name, vs, target,
				r.target("P1-"+string(e.kind)+" floor", "tasklock "+target, fmt.Sprintf("%.2f×", vs), vs >= coordVsFloor))
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
	for _, res := range rows {
		r.writeP1RedlockFloor(p, res)
	}
}

// allocsNote is " Allocations per pair: N." for a result whose
// allocations were counted ("" otherwise): those of the whole process
// inside the measured slices.
func allocsNote(x *p1Result) string {
	if x.pairs == 0 {
		return ""
	}
	return fmt.Sprintf(" Allocations per pair: %.0f.", x.mallocs/x.pairs)
}

// resultsWith returns the stores' results for which has is true.
func (r *coordReport) resultsWith(has func(*coordResult) bool) []*coordResult {
	var out []*coordResult
	for _, res := range r.results {
		if has(res) {
			out = append(out, res)
		}
	}
	return out
}

// tableHead prints a table's heading, its description and its header row;
// a column name ending in ":" is right-aligned (the colon is not printed).
func tableHead(p func(string, ...any), title, desc string, cols ...string) {
	p("")
	p("%s", title)
	p("")
	p("%s", desc)
	p("")
	names, align := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		name, right := strings.CutSuffix(c, ":")
		names[i], align[i] = name, "---"
		if right {
			align[i] = "--:"
		}
	}
	p("| %s |", strings.Join(names, " | "))
	p("|%s|", strings.Join(align, "|"))
}

// writeP1One prints etcd's and ZooKeeper's P1 with one goroutine, with
// the targets against the peer and the raw floor.
func (r *coordReport) writeP1One(p func(string, ...any)) {
	rows := r.resultsWith(func(res *coordResult) bool { return res.p1One != nil || res.p1OneErr != nil })
	if len(rows) == 0 {
		return
	}
	tableHead(p, "#### P1-etcd, P1-zk with one goroutine: Obtain+Release pairs/s",
		fmt.Sprintf("As above with one goroutine (most cron jobs are exactly this case). Allocations per pair: of the whole process inside the slices. Targets: tasklock ≥ %.2f× the peer and ≥ %.2f× the raw floor.", coordP1VsPeer, coordVsFloor),
		"store", "implementation", "pairs/s:", "slices min–max:", "allocations/pair:", "CPU µs/pair client + server:", "target", "result")
	for _, res := range rows {
		e := res.env
		if res.p1OneErr != nil {
			p("| %s | **not run**: %v | | | | | | |", e.title, res.p1OneErr)
			continue
		}
		var tl *p1Result
		for i, x := range res.p1One {
			if res.p1Impls[i].role == coordTasklock {
				tl = x
			}
			name, spread, cpu := sliceCells(x)
			allocs := "—"
			if x.pairs > 0 {
				allocs = fmt.Sprintf("%.0f", x.mallocs/x.pairs)
			}
			p("| %s | %s | %s | %s | %s | %s | | |", e.title, name, thousands(x.median()), spread, allocs, cpu)
		}
		for i, x := range res.p1One {
			role := res.p1Impls[i].role
			if tl == nil || role == coordTasklock {
				continue
			}
			want, id := coordP1VsPeer, "P1-"+string(e.kind)+" 1 goroutine"
			if role == coordFloor {
				want, id = coordVsFloor, id+" floor"
			}
			vs := pairedRatio(tl, x)
			target := fmt.Sprintf("≥ %.2f× %s", want, x.name)
			p("| %s | tasklock ÷ %s | %.2f× | | | | %s | %s |", e.title, x.name, vs, target,
				r.target(id, "tasklock, 1 goroutine, "+target, fmt.Sprintf("%.2f×", vs), vs >= want))
		}
	}
}

// writeHandoff prints etcd's and ZooKeeper's handoff row: handoffContenders
// contenders with clients of their own on one key, with the target
// against the peer's acquisitions/s.
func (r *coordReport) writeHandoff(p func(string, ...any)) {
	rows := r.resultsWith(func(res *coordResult) bool { return res.h != nil || res.hErr != nil })
	if len(rows) == 0 {
		return
	}
	tableHead(p, fmt.Sprintf("#### Handoff, etcd and ZooKeeper: %d contenders with clients of their own on one key", handoffContenders),
		fmt.Sprintf("As P3 with %d contenders (each with its own client, Store and Locker, or client and Session, or Conn), blocking obtain → release in a loop. Target: tasklock's acquisitions/s ≥ %.2f× the peer's (the pooled samples of the rounds).", handoffContenders, coordHandoffPeer),
		"store", "implementation", "acquisitions/s:", "handoff p50:", "handoff p99:", "to another: share:", "requests/acquisition:", "gave up:", "target", "result")
	var notes []string
	for _, res := range rows {
		e := res.env
		if res.hErr != nil {
			p("| %s | **not run**: %v | | | | | | | | |", e.title, res.hErr)
			continue
		}
		var tl, peer *p3Result
		for i, x := range res.h {
			if res.hImpls[i].role == coordTasklock {
				tl = x
			} else {
				peer = x
			}
			name, share := handoffCells(x)
			p("| %s | %s | %s | %s | %s | %.1f%% | %.1f | %d | | |", e.title, name, thousands(x.rate()),
				dur(percentile(x.handoffs, 0.50)), dur(percentile(x.handoffs, 0.99)), 100*share, x.callsPerAcq(), x.giveUps)
			if x.allAcq > 0 {
				notes = append(notes, fmt.Sprintf("- %s, %s: requests per acquisition: %s.", e.title, x.name, res.hReqs[i].describe(1/float64(x.allAcq))))
			}
		}
		if tl != nil && peer != nil && peer.rate() > 0 {
			vs := tl.rate() / peer.rate()
			target := fmt.Sprintf("≥ %.2f× %s", coordHandoffPeer, peer.name)
			p("| %s | tasklock ÷ %s | %.2f× | | | | | | %s | %s |", e.title, peer.name, vs, target,
				r.target("handoff-"+string(e.kind), fmt.Sprintf("tasklock, %d contenders on one key: acquisitions/s %s", handoffContenders, target), fmt.Sprintf("%.2f×", vs), vs >= coordHandoffPeer))
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
}

func (r *coordReport) writeP3(p func(string, ...any)) {
	var rows []*coordResult
	for _, res := range r.results {
		if res.p3Run {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return
	}
	p("")
	p("#### P3-etcd, P3-zk, P3-redlock: %d goroutines on one key, blocking obtain → release (samples pooled over %d runs)", r.params.goroutines, r.params.p3Rounds)
	p("")
	p("As P3: handoff from just before Release to the return of the next holder's blocking obtain; \"to another\" only where the next holder is another goroutine; wait: time inside a blocking obtain that returned the lock; per goroutine: the fewest and most acquisitions of one goroutine. Requests per acquisition: everything the clients sent during the runs (the release, every attempt, the watches or subscriptions, keepalives and pings) ÷ acquisitions. No target but P3-redlock's (below): on a contended key RedLock must cost each node at most %.0f× the requests per acquisition of tasklock on one Redis doing the same work (issue 16: no storm of split votes and wake-ups).", coordP3RedlockVsOne)
	p("")
	p("| store | implementation | acquisitions/s | handoff p50 | handoff p99 | to another: share | p50 | p99 | wait p50 | wait p99 | per goroutine | requests/acquisition | gave up |")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var notes []string
	var redlockTarget func()
	for _, res := range rows {
		e := res.env
		if res.p3Err != nil {
			p("| %s | **not run**: %v | | | | | | | | | | | |", e.title, res.p3Err)
			continue
		}
		if e.kind == kindRedLock {
			redlockTarget = func() { r.writeP3RedLockTarget(p, res) }
		}
		for i, x := range res.p3 {
			name, share := handoffCells(x)
			lo, hi := 0, 0
			if len(x.perG) > 0 {
				lo, hi = slices.Min(x.perG), slices.Max(x.perG)
			}
			p("| %s | %s | %s | %s | %s | %.1f%% | %s | %s | %s | %s | %s–%s | %.1f | %d |", e.title, name, thousands(x.rate()),
				dur(percentile(x.handoffs, 0.50)), dur(percentile(x.handoffs, 0.99)), 100*share,
				dur(percentile(x.toOther, 0.50)), dur(percentile(x.toOther, 0.99)),
				dur(percentile(x.waits, 0.50)), dur(percentile(x.waits, 0.99)), thousands(float64(lo)), thousands(float64(hi)),
				x.callsPerAcq(), x.giveUps)
			by := "none"
			if x.allAcq > 0 {
				by = res.p3Reqs[i].describe(1 / float64(x.allAcq))
			}
			notes = append(notes, fmt.Sprintf("- %s, %s: %s. Requests per acquisition: %s.", e.title, x.name, x.note, by))
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
	if redlockTarget != nil {
		redlockTarget()
	}
}

// writeP3RedLockTarget prints P3-redlock's target: the requests per
// acquisition of tasklock's busiest RedLock node against those of tasklock
// on one Redis, in the same run.
func (r *coordReport) writeP3RedLockTarget(p func(string, ...any), res *coordResult) {
	perAcq := func(role string) ([]float64, bool) {
		for i, im := range res.p3Impls {
			if im.role == role && res.p3[i].allAcq > 0 {
				out := make([]float64, len(res.p3Nodes[i]))
				for k, n := range res.p3Nodes[i] {
					out[k] = float64(n.total) / float64(res.p3[i].allAcq)
				}
				return out, true
			}
		}
		return nil, false
	}
	nodes, ok1 := perAcq(coordTasklock)
	one, ok2 := perAcq(coordOneRedis)
	if !ok1 || !ok2 {
		return
	}
	busiest, ref := slices.Max(nodes), one[0]
	vs := busiest / ref
	cells := make([]string, len(nodes))
	for k, n := range nodes {
		cells[k] = fmt.Sprintf("%.1f", n)
	}
	target := fmt.Sprintf("≤ %.0f× one Redis", coordP3RedlockVsOne)
	p("")
	p("P3-redlock, contended handoff: requests per acquisition on each RedLock node (tasklock, %d Lockers on one key) against tasklock on one Redis doing the same work, same run.", r.params.goroutines)
	p("")
	p("| per node (RedLock) | one Redis | busiest ÷ one Redis | target | result |")
	p("|--:|--:|--:|---|---|")
	p("| %s | %.1f | %.2f× | %s | %s |", strings.Join(cells, " / "), ref, vs, target,
		r.target("P3-redlock", fmt.Sprintf("tasklock on a contended key: requests per acquisition on every RedLock node %s (%d Lockers)", target, r.params.goroutines),
			fmt.Sprintf("%.2f× (%.1f vs %.1f)", vs, busiest, ref), vs <= coordP3RedlockVsOne))
}

func (r *coordReport) writeP4(p func(string, ...any)) {
	var rows []*coordResult
	for _, res := range r.results {
		if res.p4Run {
			rows = append(rows, res)
		}
	}
	if len(rows) == 0 {
		return
	}
	pr := r.params
	p("")
	p("#### P4-etcd, P4-zk, P4-redlock: requests to keep locks alive for one TTL (TTL %v)", pr.ttl)
	p("")
	p("Every implementation holds %s locks, and again %s, through clients of its own (16 goroutines obtain them), with a TTL, session TTL or session timeout of %v; all of one store are held at once, and after %v every one's requests are counted over the same %v. Per TTL: counted × TTL ÷ window. Per renewal cycle (tasklock): counted ÷ (lease renewals ÷ locks), a cycle being one renewal of every held lock (about every TTL/3). Bytes: sent + received by the implementation's connections in the window, per TTL. Targets: on etcd and ZooKeeper, tasklock's requests per renewal cycle with %s locks at most %.1f more than with %s (independent of the number of locks held); on RedLock, DESIGN P4's ≤ 1 round trip per %d leases per renewal cycle, per node.",
		thousands(float64(pr.locks)), thousands(float64(pr.few)), pr.ttl, pr.settle.Round(time.Millisecond), pr.window, thousands(float64(pr.locks)), coordP4Slack, thousands(float64(pr.few)), p4PerLeases)
	p("")
	p("| store | implementation | locks | requests per TTL | per renewal cycle | requests per TTL, by kind | KB per TTL | lost | target | result |")
	p("|---|---|--:|--:|--:|---|--:|--:|---|---|")
	var notes []string
	for _, res := range rows {
		e := res.env
		if res.p4Err != nil {
			p("| %s | **not run**: %v | | | | | | | | |", e.title, res.p4Err)
			continue
		}
		var many, few *coordHoldResult // tasklock's
		noted := map[string]bool{}
		for _, h := range res.p4 {
			if h.err != nil {
				p("| %s | %s: **failed**: %v | %s | | | | | | | |", e.title, h.name, h.err, thousands(float64(h.locks)))
				continue
			}
			perCycle := "—"
			if h.role == coordTasklock {
				perCycle = fmt.Sprintf("%.2f", h.perCycle())
				if h.locks == pr.locks {
					many = h
				} else {
					few = h
				}
			}
			target, result := "", ""
			if h.role == coordTasklock && e.kind == kindRedLock && h.locks == pr.locks {
				maxRT := float64(h.locks) / p4PerLeases
				worst := 0.0
				for _, s := range h.perServer {
					if h.cycles() > 0 {
						worst = max(worst, float64(s.total)/h.cycles())
					}
				}
				trips := "round trips"
				if maxRT == 1 {
					trips = "round trip"
				}
				target = fmt.Sprintf("≤ %.0f per cycle per node", maxRT)
				result = r.target("P4-redlock", fmt.Sprintf("tasklock: ≤ %.0f %s per renewal cycle per node for %s leases (DESIGN P4)", maxRT, trips, thousands(float64(h.locks))),
					fmt.Sprintf("%.2f (busiest node)", worst), h.renewals > 0 && worst <= maxRT)
			}
			kb := float64(h.total.sent+h.total.recv) * h.scale() / 1024
			kbs := thousands(kb)
			if kb < 10 {
				kbs = fmt.Sprintf("%.1f", kb)
			}
			p("| %s | %s | %s | %.1f | %s | %s | %s | %d | %s | %s |", e.title, h.name, thousands(float64(h.locks)), h.perTTL(), perCycle,
				h.total.describe(h.scale()), kbs, h.lost, target, result)
			if !noted[h.name] {
				noted[h.name] = true
				notes = append(notes, fmt.Sprintf("- %s, %s: %s.", e.title, h.name, h.note))
			}
			if h.role == coordTasklock {
				notes = append(notes, fmt.Sprintf("  - %s locks: obtained in %v; in the %v window %s lease renewals = %.2f renewal cycles.",
					thousands(float64(h.locks)), h.obtainTime.Round(time.Millisecond), h.window.Round(time.Millisecond), thousands(float64(h.renewals)), h.cycles()))
			}
		}
		if e.kind == kindRedLock {
			n, nodes := float64(pr.locks), float64(len(e.srvs))
			p("| %s | %s (computed, not measured) | %s | %s | %s | EVALSHA (Extend) %s | — | — | | |", e.title, redsyncName, thousands(n),
				thousands(3*n*nodes), thousands(n*nodes), thousands(3*n*nodes))
			notes = append(notes, fmt.Sprintf("- %s, %s: redsync renews nothing by itself and has no batch call: keeping a lock means calling Mutex.Extend, one script call (one round trip) per node, per lock; at tasklock's cadence (every TTL/3) that is %s per renewal cycle and %s per TTL for %s locks on %d nodes, and a goroutine or timer per lock to make the calls. Computed, not measured.",
				e.title, redsyncName, thousands(n*nodes), thousands(3*n*nodes), thousands(n), len(e.srvs)))
		}
		if (e.kind == kindEtcd || e.kind == kindZK) && many != nil && few != nil {
			ok := many.renewals > 0 && few.renewals > 0 && many.perCycle() <= few.perCycle()+coordP4Slack
			r.target("P4-"+string(e.kind), fmt.Sprintf("tasklock: requests per renewal cycle independent of the locks held (%s locks ≤ %s locks + %.1f)", thousands(float64(many.locks)), thousands(float64(few.locks)), coordP4Slack),
				fmt.Sprintf("%.2f vs %.2f", many.perCycle(), few.perCycle()), ok)
		}
	}
	p("")
	for _, n := range notes {
		p("%s", n)
	}
}

// handoffCells are the cells of a row of handoff results that every table
// prints alike: the name (with the errors, if any) and the share of
// handoffs to another goroutine.
func handoffCells(x *p3Result) (name string, share float64) {
	name = x.name
	if x.errs > 0 {
		name += fmt.Sprintf(" (%d errors: %v)", x.errs, x.err)
	}
	if len(x.handoffs) > 0 {
		share = float64(len(x.toOther)) / float64(len(x.handoffs))
	}
	return name, share
}

// sliceCells are the cells of a row of runSlices' results that every table
// prints alike: the name (with the failed pairs, if any), the range of the
// slices' pairs/s and the CPU time per pair.
func sliceCells(x *p1Result) (name, spread, cpu string) {
	name, spread, cpu = x.name, "—", "—"
	if x.errs > 0 {
		name += fmt.Sprintf(" (%d failed pairs: %v)", x.errs, x.err)
	}
	if c, s := x.cpuPerPair(); c > 0 {
		cpu = fmt.Sprintf("%.1f + %.1f = %.1f", c, s, c+s)
	}
	if len(x.slices) > 0 {
		spread = thousands(slices.Min(x.slices)) + "–" + thousands(slices.Max(x.slices))
	}
	return name, spread, cpu
}

// coordDeps names the versions of the peers' libraries built in.
func coordDeps() string {
	return depVersions("go.etcd.io/etcd/client/v3", "github.com/go-zookeeper/zk", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9")
}
