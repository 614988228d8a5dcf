package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

// ledgerName is the ledger's node under Root. No key node has this name:
// escapeName writes every '%' of a key as %25, and unescapeName refuses it
// ("le" is not hex), so Leases skips it.
const ledgerName = "%ledger"

// Limits of the ledger.
const (
	// maxLedgerName bounds an escaped job or trigger name.
	maxLedgerName = 4096
	// maxRecordData bounds a run record's encoded data: ZooKeeper refuses
	// requests over jute.maxbuffer (1 MiB less a byte by default).
	maxRecordData = 1000 * 1000
	// claimRounds bounds the attempts at one claim while its node keeps
	// changing under it.
	claimRounds = 8
	// pruneChunk is how many expired claims one guarded multi deletes.
	pruneChunk = 500
	// stateRounds bounds the attempts at a change of the job states node
	// while other writers keep changing it.
	stateRounds = 32
)

func (s *Store) ledgerDir() string { return s.root + "/" + ledgerName }
func (s *Store) claimsDir() string { return s.ledgerDir() + "/claims" }
func (s *Store) runsDir() string   { return s.ledgerDir() + "/runs" }

// runningDir holds a marker per running record (ledger.RunRunning), named
// by runningName, so that the sweep every scheduler makes every few seconds
// for running records of dead nodes reads those records and not every
// job's history. It may hold markers whose record is no longer running
// (Runs deletes those), never lack one whose record is running: a running
// record is written in one multi with its marker's create (or a check that
// it exists), and a final one in one multi with its marker's delete.
func (s *Store) runningDir() string { return s.ledgerDir() + "/running" }
func (s *Store) statesNode() string {
	return s.ledgerDir() + "/jobs"
}

// specsDir holds a node per registered job, named by its escaped name,
// whose data is tickHex(Since) followed by Spec. It is apart from the job
// states node, which JobStates reads whole, so that registered jobs do not
// make that read grow.
func (s *Store) specsDir() string { return s.ledgerDir() + "/specs" }

// tickHex is an instant as 24 hex digits in time order: the Unix seconds
// offset by 2^63, then the nanoseconds.
func tickHex(t time.Time) string {
	return fmt.Sprintf("%016x%08x", uint64(t.Unix())^1<<63, uint32(t.Nanosecond()))
}

// invTickHex is tickHex with every bit inverted: in reverse time order.
func invTickHex(t time.Time) string {
	return fmt.Sprintf("%016x%08x", ^(uint64(t.Unix()) ^ 1<<63), ^uint32(t.Nanosecond()))
}

// shardMark separates a shard number from the rest of a claim's or a
// record's name: "%%" is in no escaped name (each '%' escapeName writes
// is followed by two hex digits).
const shardMark = "%%"

// shardSuffix is the end of a claim's or a record's name for shard: none
// for shard 0, so that claims and records made before shards existed are
// shard 0's; "%%" and the shard in decimal for the others.
func shardSuffix(shard int) string {
	if shard == 0 {
		return ""
	}
	return shardMark + strconv.Itoa(shard)
}

// claimPath is the node of the claim (job, tick, trigger, shard).
func (s *Store) claimPath(job string, tick time.Time, trigger string, shard int) string {
	name := tickHex(tick)
	if trigger != "" {
		name += "-" + escapeName(trigger)
	}
	return s.claimsDir() + "/" + escapeName(job) + "/" + name + shardSuffix(shard)
}

// runName is the name of a run record's node under its job's node:
// <tick, inverted>-<trigger>-<attempt, inverted>[%%<shard>], so that names
// sort about as Runs lists records (exactly when the trigger has no
// character below '-' and none escaped, and the job is not sharded); Runs
// sorts by the keys it parses from them.
func runName(k ledger.RunKey) string {
	return fmt.Sprintf("%s-%s-%08x", invTickHex(k.Tick), escapeName(k.Trigger), ^uint32(k.Attempt)) + shardSuffix(k.Shard)
}

// keyRecord is a record with k's key and nothing else, for
// RunQuery.Matches on what a node's name tells.
func keyRecord(k ledger.RunKey) *ledger.RunRecord {
	return &ledger.RunRecord{Job: k.Job, Tick: k.Tick, Trigger: k.Trigger, Shard: k.Shard, Attempt: k.Attempt}
}

// runningName is the name of the marker of job's running record k under
// runningDir: the escaped job, "%%" and the record's runName. An escaped
// name never holds "%%" nor ends with '%' (each '%' it has is followed by
// two hex digits), so the first "%%" ends the job.
func runningName(job string, k ledger.RunKey) string {
	return escapeName(job) + "%%" + runName(k)
}

// parseMarker reverses runningName: the record's key and the escaped job.
func parseMarker(name string) (ledger.RunKey, string, bool) {
	ej, rn, ok := strings.Cut(name, "%%")
	if !ok {
		return ledger.RunKey{}, "", false
	}
	job, ok := unescapeName(ej)
	if !ok {
		return ledger.RunKey{}, "", false
	}
	k, ok := parseRunName(job, rn)
	return k, ej, ok
}

// parseRunName reverses runName for a record of job.
func parseRunName(job, name string) (ledger.RunKey, bool) {
	shard := 0
	if base, sh, ok := strings.Cut(name, shardMark); ok {
		n, err := strconv.Atoi(sh)
		if err != nil || n <= 0 || n >= ledger.MaxShards || sh != strconv.Itoa(n) {
			return ledger.RunKey{}, false
		}
		name, shard = base, n
	}
	n := len(name)
	if n < 24+1+1+8 || name[24] != '-' || name[n-9] != '-' {
		return ledger.RunKey{}, false
	}
	sec, err1 := strconv.ParseUint(name[:16], 16, 64)
	nsec, err2 := strconv.ParseUint(name[16:24], 16, 32)
	att, err3 := strconv.ParseUint(name[n-8:], 16, 32)
	trigger, ok := unescapeName(name[25 : n-9])
	if name[25:n-9] == "" {
		trigger, ok = "", true
	}
	if err1 != nil || err2 != nil || err3 != nil || !ok {
		return ledger.RunKey{}, false
	}
	tick := time.Unix(int64(^sec^1<<63), int64(^uint32(nsec))).UTC()
	return ledger.RunKey{Job: job, Tick: tick, Trigger: trigger, Shard: shard, Attempt: int(^uint32(att))}, true
}

// checkLedgerName refuses names whose escaped form is too long to keep.
func checkLedgerName(what, name string) error {
	if n := len(escapeName(name)); n > maxLedgerName {
		return fmt.Errorf("zkstore: %s is %d bytes long escaped (at most %d): %w", what, n, maxLedgerName, ledger.ErrUnsupported)
	}
	return nil
}

// ensureNode creates the node at path (a container when container is
// set, else persistent) and, when missing, its persistent parents up to
// Root.
func (s *Store) ensureNode(path string, container bool) error {
	create := func() error {
		var err error
		if container {
			_, err = s.conn.CreateContainer(path, nil, zk.FlagContainer, s.acl)
		} else {
			_, err = s.conn.Create(path, nil, zk.FlagPersistent, s.acl)
		}
		return err
	}
	err := create()
	if errors.Is(err, zk.ErrNoNode) {
		parent := path[:strings.LastIndexByte(path, '/')]
		if parent == s.root {
			err = s.ensureRoot()
		} else {
			err = s.ensureNode(parent, false)
		}
		if err != nil {
			return err
		}
		err = create()
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// rawNode is a node read by readRaw.
type rawNode struct {
	data []byte
	stat *zk.Stat
	err  error
}

// readRaw reads the given children of dir, pipelined.
func (s *Store) readRaw(dir string, names []string) []rawNode {
	out := make([]rawNode, len(names))
	parallel(len(names), func(i int) {
		out[i].data, out[i].stat, out[i].err = s.conn.Get(dir + "/" + names[i])
	})
	return out
}

// serverClock reads the server's time once for a call, on a goroutine
// of its own, so that it travels alongside the call's other requests.
type serverClock struct {
	s    *Store
	once sync.Once
	done chan struct{}
	now  int64
	err  error
}

func newServerClock(s *Store) *serverClock { return &serverClock{s: s, done: make(chan struct{})} }

// start sends the request, unless it was sent already.
func (c *serverClock) start() {
	c.once.Do(func() {
		go func() {
			c.now, c.err = c.s.serverNow()
			if errors.Is(c.err, zk.ErrNoNode) { // no Root yet
				if c.err = c.s.ensureRoot(); c.err == nil {
					c.now, c.err = c.s.serverNow()
				}
			}
			close(c.done)
		}()
	})
}

// wait returns the server's time (ms), sending the request if needed.
func (c *serverClock) wait() (int64, error) {
	c.start()
	<-c.done
	return c.now, c.err
}

// claimData is what a claim node holds, as JSON.
type claimData struct {
	Token  string `json:"token"` // escaped with escapeName: any bytes compare exactly
	Node   string `json:"node"`
	Retain int64  `json:"retain_ms"` // from the node's ctime
}

// claimExpired reports whether a claim node read as b with stat st has
// outlived its retention at the server's time now (ms). A node whose data
// is not a claim's never expires.
func claimExpired(b []byte, st *zk.Stat, now int64) (claimData, bool) {
	var d claimData
	if json.Unmarshal(b, &d) != nil || d.Retain <= 0 {
		return claimData{}, false
	}
	return d, st.Ctime+d.Retain < now
}

// Claim implements ledger.Ledger. Each claim is a persistent node
// Root/%ledger/claims/<job>/<tick>[-<trigger>], created (pipelined, 16 at
// a time) holding the token, the node and Retain; its ctime is the claim's
// time. A create that finds the node there reads it (alongside one write
// of Root's data, once per call, for the server's time): the same token's
// claim is the caller's, another's live one a *ClaimedError. An expired
// claim is taken over by a multi that checks the version of the job's
// claims node (raised by every delete of a claim), deletes the old node
// and creates the new one.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: claim: %w", err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	for i := range ps {
		if err := ps[i].Check(); err != nil {
			return nil, fmt.Errorf("zkstore: %w", err)
		}
		if err := checkLedgerName("Job", ps[i].Job); err != nil {
			return nil, err
		}
		if err := checkLedgerName("Trigger", ps[i].Trigger); err != nil {
			return nil, err
		}
	}
	res, err := call(ctx, func() ([]error, error) { return s.claim(ps) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: claim %d ticks: %w", len(ps), err)
	}
	return res, nil
}

func (s *Store) claim(ps []ledger.ClaimParams) ([]error, error) {
	res := make([]error, len(ps))
	errs := make([]error, len(ps))
	clock := newServerClock(s)
	parallel(len(ps), func(i int) { res[i], errs[i] = s.claimOne(&ps[i], clock) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// claimOne makes one claim: its result, or an error when it is unknown.
func (s *Store) claimOne(p *ledger.ClaimParams, clock *serverClock) (error, error) {
	path := s.claimPath(p.Job, p.Tick, p.Trigger, p.Shard)
	token := escapeName(p.Token)
	retain := driver.Units(p.Retain, time.Millisecond)
	data, err := json.Marshal(claimData{Token: token, Node: p.Node, Retain: retain})
	if err != nil {
		return nil, err
	}
	for range claimRounds {
		_, err := s.conn.Create(path, data, zk.FlagPersistent, s.acl)
		switch {
		case err == nil:
			return nil, nil
		case errors.Is(err, zk.ErrNoNode):
			if err := s.ensureNode(path[:strings.LastIndexByte(path, '/')], false); err != nil {
				return nil, err
			}
			continue
		case !errors.Is(err, zk.ErrNodeExists):
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		clock.start()
		b, st, err := s.conn.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted meanwhile: create it again
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		now, err := clock.wait()
		if err != nil {
			return nil, fmt.Errorf("read the server's time: %w", err)
		}
		d, expired := claimExpired(b, st, now)
		if !expired {
			if d.Token == token {
				return nil, nil
			}
			return &ledger.ClaimedError{Node: d.Node, At: time.UnixMilli(st.Ctime).UTC()}, nil
		}
		done, err := s.takeOver(path, data, now)
		if err != nil || done {
			return nil, err
		}
	}
	return nil, fmt.Errorf("claim %s: the node kept changing", path)
}

// takeOver replaces the expired claim node at path by a new one holding
// data. It reads the job's claims node (the guard) first and the claim
// node after it: a delete of the claim raises the guard's version, so a
// claim node found expired is the same one when the multi's check passes.
// Plain creates leave the guard alone: a node present at the read can be
// replaced only after a delete. It reports false when the node changed
// or went meanwhile (the caller looks again).
func (s *Store) takeOver(path string, data []byte, now int64) (bool, error) {
	dir := path[:strings.LastIndexByte(path, '/')]
	guard, ok, err := s.readGuard(dir)
	if err != nil || !ok {
		return false, err
	}
	b, st, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if _, expired := claimExpired(b, st, now); !expired {
		return false, nil
	}
	_, err = s.conn.Multi(
		&zk.CheckVersionRequest{Path: dir, Version: guard},
		&zk.DeleteRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: s.acl, Flags: zk.FlagPersistent},
		&zk.SetDataRequest{Path: dir, Version: -1},
	)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
		return false, nil
	}
	return false, fmt.Errorf("take over %s: %w", path, err)
}

// readGuard returns the data version of a job's claims node dir (the
// guard), and false when it is missing.
func (s *Store) readGuard(dir string) (int32, bool, error) {
	_, st, err := s.conn.Get(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", dir, err)
	}
	return st.Version, true, nil
}

// runData is what a run record's node holds, as JSON; the key is in its
// name and its job node's.
type runData struct {
	Shards int              `json:"shards,omitempty"`
	Node   string           `json:"node,omitempty"`
	Fence  uint64           `json:"fence,omitempty"`
	Start  time.Time        `json:"start"`
	End    time.Time        `json:"end"`
	Status ledger.RunStatus `json:"status"`
	Error  string           `json:"error,omitempty"`
	Output string           `json:"output,omitempty"`
}

// RecordRuns implements ledger.Ledger: one persistent node per record,
// Root/%ledger/runs/<job>/<name> (see runName), under a container node per
// job. Each is written by a multi, pipelined 16 at a time, that creates it
// (or sets it when it exists) and creates the record's marker under
// Root/%ledger/running when it is running (or checks that it exists), or
// deletes it when it is final (none when it is missing): one round trip
// for a new running record or for a final one that replaces a running
// one, up to three when the guesses miss. Recorded is the node's mtime.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zkstore: record runs: %w", err)
	}
	if len(rs) == 0 {
		return nil
	}
	writes := make(map[string]*recordWrite, len(rs))
	var order []*recordWrite
	for _, r := range rs {
		switch {
		case r.Job == "" || r.Tick.IsZero():
			return errors.New("zkstore: record run: empty Job or zero Tick")
		case r.Attempt < 0 || int64(r.Attempt) > 1<<31-1:
			return fmt.Errorf("zkstore: record run %q: Attempt %d out of range: %w", r.Job, r.Attempt, ledger.ErrUnsupported)
		case r.Shard < 0 || r.Shard >= ledger.MaxShards:
			return fmt.Errorf("zkstore: record run %q: Shard %d is not in [0, %d)", r.Job, r.Shard, ledger.MaxShards)
		}
		if err := checkLedgerName("Job", r.Job); err != nil {
			return err
		}
		if err := checkLedgerName("Trigger", r.Trigger); err != nil {
			return err
		}
		b, err := json.Marshal(runData{
			Shards: r.Shards, Node: r.Node, Fence: r.Fence, Start: r.Start.Round(0), End: r.End.Round(0),
			Status: r.Status, Error: r.Error, Output: r.Output,
		})
		if err != nil {
			return fmt.Errorf("zkstore: record run %q: %w", r.Job, err)
		}
		if len(b) > maxRecordData {
			return fmt.Errorf("zkstore: record run %q: %d bytes encoded (at most %d): %w", r.Job, len(b), maxRecordData, ledger.ErrUnsupported)
		}
		path := s.runsDir() + "/" + escapeName(r.Job) + "/" + runName(r.Key())
		w, dup := writes[path]
		if !dup {
			w = &recordWrite{path: path, marker: s.runningDir() + "/" + runningName(r.Job, r.Key())}
			writes[path] = w
			order = append(order, w)
		}
		w.data, w.running = b, r.Status == ledger.RunRunning // the last record with a key wins
	}
	_, err := call(ctx, func() (struct{}, error) {
		errs := make([]error, len(order))
		parallel(len(order), func(i int) { errs[i] = s.writeRecord(order[i]) })
		return struct{}{}, errors.Join(errs...)
	}, nil)
	if err != nil {
		return fmt.Errorf("zkstore: record %d runs: %w", len(rs), err)
	}
	return nil
}

// recordWrite is a record node to write, and its marker's path.
type recordWrite struct {
	path, marker string
	data         []byte
	running      bool
}

// Guesses of writeRecord about the nodes it writes.
const (
	guessAbsent = iota // create the node
	guessExists        // set the record, check the marker, delete it
	guessNone          // leave the marker alone (a final record's is gone)
)

// writeRecord writes w's record node in one multi with its marker's
// create (or check) when it is running, with its delete when it is final.
// It guesses first that a running record is new and that a final one
// replaces a running one (the record and its marker are there), as the
// schedulers write them, and tries again with what the failing operation
// tells.
func (s *Store) writeRecord(w *recordWrite) error {
	rec, mark := guessExists, guessExists
	if w.running {
		rec, mark = guessAbsent, guessAbsent
	}
	for range 8 {
		ops := make([]any, 0, 2)
		if rec == guessAbsent {
			ops = append(ops, &zk.CreateRequest{Path: w.path, Data: w.data, Acl: s.acl, Flags: zk.FlagPersistent})
		} else {
			ops = append(ops, &zk.SetDataRequest{Path: w.path, Data: w.data, Version: -1})
		}
		switch {
		case w.running && mark == guessAbsent:
			ops = append(ops, &zk.CreateRequest{Path: w.marker, Acl: s.acl, Flags: zk.FlagPersistent})
		case w.running:
			ops = append(ops, &zk.CheckVersionRequest{Path: w.marker, Version: -1})
		case mark == guessExists:
			ops = append(ops, &zk.DeleteRequest{Path: w.marker, Version: -1})
		}
		resp, err := s.conn.Multi(ops...)
		if err == nil {
			return nil
		}
		at := failedOp(resp)
		switch {
		case at == 0 && rec == guessAbsent && errors.Is(err, zk.ErrNodeExists):
			rec = guessExists
		case at == 0 && rec == guessAbsent && errors.Is(err, zk.ErrNoNode):
			// The job's container is missing, or the server just removed it.
			if err := s.ensureNode(w.path[:strings.LastIndexByte(w.path, '/')], true); err != nil {
				return err
			}
		case at == 0 && errors.Is(err, zk.ErrNoNode):
			rec = guessAbsent // pruned meanwhile
		case at == 1 && !w.running && errors.Is(err, zk.ErrNoNode):
			mark = guessNone
		case at == 1 && mark == guessAbsent && errors.Is(err, zk.ErrNodeExists):
			mark = guessExists
		case at == 1 && mark == guessAbsent && errors.Is(err, zk.ErrNoNode):
			if err := s.ensureNode(s.runningDir(), false); err != nil {
				return err
			}
		case at == 1 && errors.Is(err, zk.ErrNoNode):
			mark = guessAbsent // deleted meanwhile
		default:
			return fmt.Errorf("write %s: %w", w.path, err)
		}
	}
	return fmt.Errorf("write %s: it or its marker kept changing", w.path)
}

// failedOp returns the index of the operation that failed a multi: the
// first with an error (those before it have none), or -1.
func failedOp(resp []zk.MultiResponse) int {
	for i, r := range resp {
		if r.Error != nil {
			return i
		}
	}
	return -1
}

// runNode is a run record's node, known by its name.
type runNode struct {
	key  ledger.RunKey
	path string
}

// listRuns lists the record nodes of the given jobs (escaped names), each
// job's children pipelined, keeping those keep accepts. A job node that is
// missing has none.
func (s *Store) listRuns(jobs []string, keep func(ledger.RunKey) bool) ([][]runNode, error) {
	out := make([][]runNode, len(jobs))
	errs := make([]error, len(jobs))
	parallel(len(jobs), func(i int) {
		job, ok := unescapeName(jobs[i])
		if !ok {
			return
		}
		dir := s.runsDir() + "/" + jobs[i]
		names, _, err := s.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		if err != nil {
			errs[i] = fmt.Errorf("list %s: %w", dir, err)
			return
		}
		for _, name := range names {
			if k, ok := parseRunName(job, name); ok && (keep == nil || keep(k)) {
				out[i] = append(out[i], runNode{key: k, path: dir + "/" + name})
			}
		}
	})
	return out, errors.Join(errs...)
}

// runJobs returns the escaped names of the jobs with run records: job's
// alone when it is set.
func (s *Store) runJobs(job string) ([]string, error) {
	if job != "" {
		return []string{escapeName(job)}, nil
	}
	jobs, _, err := s.conn.Children(s.runsDir())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.runsDir(), err)
	}
	return jobs, nil
}

// Runs implements ledger.Ledger. It lists the job's record nodes (for
// every job: Root/%ledger/runs, then each job's, 16 at a time), selects by
// the keys in their names (From, To, Before), sorts them and reads the
// data of as many as Limit needs, in listing order, pipelined: two round
// trips for one job and a Limit of up to 16 without Status. Every job's
// running records (Status ledger.RunRunning, no Job), the schedulers'
// sweep, are read through their markers instead: a list of
// Root/%ledger/running, a read of each record a marker names, and a
// multi per marker found stale, which deletes it.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: runs: %w", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("zkstore: runs: negative Limit %d", q.Limit)
	}
	out, err := call(ctx, func() ([]ledger.RunRecord, error) { return s.runs(q) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: runs: %w", err)
	}
	return out, nil
}

// decodeRecord returns the record of node n, read as rn.
func decodeRecord(n runNode, rn rawNode) (ledger.RunRecord, error) {
	var d runData
	if err := json.Unmarshal(rn.data, &d); err != nil {
		return ledger.RunRecord{}, fmt.Errorf("bad record at %s: %w", n.path, err)
	}
	k := n.key
	return ledger.RunRecord{
		Job: k.Job, Tick: k.Tick, Trigger: k.Trigger, Shard: k.Shard, Shards: d.Shards, Attempt: k.Attempt, Node: d.Node, Fence: d.Fence,
		Start: d.Start, End: d.End, Status: d.Status, Error: d.Error, Output: d.Output,
		Recorded: time.UnixMilli(rn.stat.Mtime).UTC(),
	}, nil
}

func (s *Store) runs(q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if q.Status == ledger.RunRunning && q.Job == "" {
		return s.runningRuns(q)
	}
	jobs, err := s.runJobs(q.Job)
	if err != nil {
		return nil, err
	}
	byKey := q
	byKey.Status = ""
	lists, err := s.listRuns(jobs, func(k ledger.RunKey) bool { return byKey.Matches(keyRecord(k)) })
	if err != nil {
		return nil, err
	}
	cands := slices.Concat(lists...)
	slices.SortFunc(cands, func(a, b runNode) int { return a.key.Compare(b.key) })
	var out []ledger.RunRecord
	for lo := 0; lo < len(cands) && (q.Limit == 0 || len(out) < q.Limit); {
		n := len(cands) - lo
		if q.Limit > 0 {
			want := q.Limit - len(out)
			if q.Status != "" {
				want = max(2*want, 64)
			}
			n = min(n, want)
		}
		win := cands[lo : lo+n]
		read := make([]rawNode, n)
		parallel(n, func(i int) { read[i].data, read[i].stat, read[i].err = s.conn.Get(win[i].path) })
		for i, rn := range read {
			if errors.Is(rn.err, zk.ErrNoNode) {
				continue // pruned meanwhile
			}
			if rn.err != nil {
				return nil, fmt.Errorf("read %s: %w", win[i].path, rn.err)
			}
			r, err := decodeRecord(win[i], rn)
			if err != nil {
				return nil, err
			}
			if q.Status != "" && r.Status != q.Status {
				continue
			}
			out = append(out, r)
			if q.Limit > 0 && len(out) == q.Limit {
				break
			}
		}
		lo += n
	}
	return out, nil
}

// runningRuns is runs for every job's running records: it lists the
// markers (Root/%ledger/running), reads the records they name that q's
// keys select, pipelined, and deletes the markers whose record is gone or
// final (best effort: one left costs a read at the next sweep).
func (s *Store) runningRuns(q ledger.RunQuery) ([]ledger.RunRecord, error) {
	names, _, err := s.conn.Children(s.runningDir())
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.runningDir(), err)
	}
	byKey := q
	byKey.Status = ""
	var cands []runNode
	var markers []string
	for _, name := range names {
		k, ej, ok := parseMarker(name)
		if !ok || !byKey.Matches(keyRecord(k)) {
			continue
		}
		cands = append(cands, runNode{key: k, path: s.runsDir() + "/" + ej + "/" + runName(k)})
		markers = append(markers, s.runningDir()+"/"+name)
	}
	read := make([]rawNode, len(cands))
	parallel(len(cands), func(i int) { read[i].data, read[i].stat, read[i].err = s.conn.Get(cands[i].path) })
	var out []ledger.RunRecord
	var stale []int
	for i, rn := range read {
		if errors.Is(rn.err, zk.ErrNoNode) {
			stale = append(stale, i)
			continue
		}
		if rn.err != nil {
			return nil, fmt.Errorf("read %s: %w", cands[i].path, rn.err)
		}
		r, err := decodeRecord(cands[i], rn)
		if err != nil {
			return nil, err
		}
		if r.Status != ledger.RunRunning {
			stale = append(stale, i)
			continue
		}
		if q.Matches(&r) {
			out = append(out, r)
		}
	}
	parallel(len(stale), func(i int) {
		j := stale[i]
		var st *zk.Stat // missing
		if read[j].err == nil {
			st = read[j].stat
		}
		s.dropMarker(markers[j], cands[j].path, st)
	})
	slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// dropMarker deletes the marker at path of the record at rec, read with
// stat st (nil: found missing), unless the record changed since: a multi
// checks the record's version, or, for a missing record, creates and
// deletes it (and its job's node when that is missing too), so that a
// record written running meanwhile keeps its marker. Errors are ignored.
func (s *Store) dropMarker(marker, rec string, st *zk.Stat) {
	del := &zk.DeleteRequest{Path: marker, Version: -1}
	if st != nil {
		_, _ = s.conn.Multi(&zk.CheckVersionRequest{Path: rec, Version: st.Version}, del)
		return
	}
	create := &zk.CreateRequest{Path: rec, Acl: s.acl, Flags: zk.FlagPersistent}
	undo := &zk.DeleteRequest{Path: rec, Version: -1}
	_, err := s.conn.Multi(create, undo, del)
	if errors.Is(err, zk.ErrNoNode) {
		dir := rec[:strings.LastIndexByte(rec, '/')]
		_, _ = s.conn.Multi(&zk.CreateRequest{Path: dir, Acl: s.acl, Flags: zk.FlagPersistent}, create, undo,
			&zk.DeleteRequest{Path: dir, Version: -1}, del)
	}
}

// statesData is what the job states node holds, as JSON: the jobs not in
// the default state, by escaped name.
type statesData map[string]*jobData

type jobData struct {
	Paused   bool          `json:"paused,omitempty"`
	Triggers []triggerData `json:"triggers,omitempty"`
}

type triggerData struct {
	ID string `json:"id"` // escaped with escapeName
	At int64  `json:"at_ms"`
	// Tick is the backfill's or re-run's tick, RFC 3339 in UTC; "" for a
	// trigger-now.
	Tick  string `json:"tick,omitempty"`
	Rerun bool   `json:"rerun,omitempty"`
	// Cancel is a cancel request's target (ledger.TriggerRequest's
	// CancelField); "" for a request to run.
	Cancel string `json:"cancel,omitempty"`
}

func (j *jobData) state(job string) ledger.JobState {
	st := ledger.JobState{Job: job, Paused: j.Paused}
	for _, t := range j.Triggers {
		id, _ := unescapeName(t.ID)
		tr := ledger.TriggerRequest{ID: id, At: time.UnixMilli(t.At).UTC(), Rerun: t.Rerun}
		if tick, err := time.Parse(time.RFC3339Nano, t.Tick); err == nil {
			tr.Tick = tick.UTC()
		}
		if tr.SetCancelField(t.Cancel) != nil {
			continue // not written by this package: neither a run nor a cancel to act on
		}
		st.Triggers = append(st.Triggers, tr)
	}
	return st
}

// updateStates applies change to the job states node, read with its
// version, and writes it back when change reports a change, version
// checked; it reads again when another writer came between. With needNow
// the server's time (ms) is read alongside, for change.
func (s *Store) updateStates(needNow bool, change func(m statesData, now int64) bool) (statesData, error) {
	path := s.statesNode()
	for range stateRounds {
		var clock *serverClock
		if needNow {
			clock = newServerClock(s)
			clock.start()
		}
		b, st, err := s.conn.Get(path)
		exists := err == nil
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		m := statesData{}
		if exists && len(b) > 0 {
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, fmt.Errorf("bad job states at %s: %w", path, err)
			}
		}
		var now int64
		if clock != nil {
			if now, err = clock.wait(); err != nil {
				return nil, fmt.Errorf("read the server's time: %w", err)
			}
		}
		if !change(m, now) {
			return m, nil
		}
		data, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		if exists {
			_, err = s.conn.Set(path, data, st.Version)
		} else {
			_, err = s.conn.Create(path, data, zk.FlagPersistent, s.acl)
			if errors.Is(err, zk.ErrNoNode) {
				if err := s.ensureNode(s.ledgerDir(), false); err != nil {
					return nil, err
				}
				continue
			}
		}
		switch {
		case err == nil:
			return m, nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
			continue // another writer came between
		}
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return nil, fmt.Errorf("write %s: it kept changing", path)
}

// SetJobState implements ledger.Ledger. Every job's state is in one node,
// Root/%ledger/jobs, so the change is a read and a version-checked write
// (none when nothing changes); a trigger request's At is the server's
// time, read by a write of Root's data alongside the read. The job's
// registration, Root/%ledger/specs/<job>, is read alongside. JobRegister
// reads the registration and, only when its spec differs, writes it,
// version checked, and reads the job's state alongside; JobForget updates
// the states node and deletes the registration. Since is kept to the
// nanosecond.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, fmt.Errorf("zkstore: set job state: %w", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("zkstore: %w", err)
	}
	if err := checkLedgerName("Job", p.Job); err != nil {
		return ledger.JobState{}, err
	}
	if err := checkLedgerName("Trigger", p.Trigger); err != nil {
		return ledger.JobState{}, err
	}
	if err := checkLedgerName("RunTrigger", p.RunTrigger); err != nil {
		return ledger.JobState{}, err
	}
	st, err := call(ctx, func() (ledger.JobState, error) { return s.setJobState(p) }, nil)
	if err != nil {
		return ledger.JobState{}, fmt.Errorf("zkstore: set job state %q: %w", p.Job, err)
	}
	return st, nil
}

func (s *Store) setJobState(p ledger.JobStateParams) (ledger.JobState, error) {
	job, id := escapeName(p.Job), escapeName(p.Trigger)
	var (
		m         statesData
		spec      ledger.JobState // the registration's fields
		err, err2 error
	)
	switch p.Op {
	case ledger.JobRegister:
		parallel(2, func(i int) {
			if i == 0 {
				spec, err = s.register(job, p.Spec, p.Since)
			} else {
				m, err2 = s.readStates()
			}
		})
	case ledger.JobForget:
		parallel(2, func(i int) {
			if i == 0 {
				m, err = s.updateStates(false, func(m statesData, _ int64) bool {
					_, ok := m[job]
					delete(m, job)
					return ok
				})
			} else {
				err2 = s.conn.Delete(s.specsDir()+"/"+job, -1)
				if errors.Is(err2, zk.ErrNoNode) {
					err2 = nil
				}
			}
		})
	default:
		parallel(2, func(i int) {
			if i == 1 {
				spec, err2 = s.readSpec(job)
				return
			}
			m, err = s.updateStates(p.Op == ledger.JobTrigger || p.Op == ledger.JobCancel, func(m statesData, now int64) bool {
				j := m[job]
				if j == nil {
					j = &jobData{}
				}
				has := slices.IndexFunc(j.Triggers, func(t triggerData) bool { return t.ID == id })
				switch {
				case p.Op == ledger.JobPause && !j.Paused:
					j.Paused = true
				case p.Op == ledger.JobResume && j.Paused:
					j.Paused = false
				case (p.Op == ledger.JobTrigger || p.Op == ledger.JobCancel) && has < 0:
					tr := p.Request()
					td := triggerData{ID: id, At: now, Rerun: tr.Rerun, Cancel: tr.CancelField()}
					if !tr.Tick.IsZero() {
						td.Tick = tr.Tick.Format(time.RFC3339Nano)
					}
					j.Triggers = append(j.Triggers, td)
				case p.Op == ledger.JobTriggerDone && has >= 0:
					j.Triggers = slices.Delete(j.Triggers, has, has+1)
				default:
					return false
				}
				if !j.Paused && len(j.Triggers) == 0 {
					delete(m, job)
				} else {
					m[job] = j
				}
				return true
			})
		})
	}
	if err = errors.Join(err, err2); err != nil {
		return ledger.JobState{}, err
	}
	st := ledger.JobState{Job: p.Job}
	if j := m[job]; j != nil {
		st = j.state(p.Job)
	}
	if p.Op != ledger.JobForget {
		st.Spec, st.Since = spec.Spec, spec.Since
	}
	return st, nil
}

// readStates reads the job states node; no node is no state.
func (s *Store) readStates() (statesData, error) {
	b, _, err := s.conn.Get(s.statesNode())
	if errors.Is(err, zk.ErrNoNode) {
		return statesData{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.statesNode(), err)
	}
	m := statesData{}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("bad job states at %s: %w", s.statesNode(), err)
		}
	}
	return m, nil
}

// parseSpec reads the data of a registration node into Spec and Since.
func parseSpec(path string, b []byte) (ledger.JobState, error) {
	var st ledger.JobState
	if len(b) <= 24 {
		return st, fmt.Errorf("bad job registration at %s", path)
	}
	sec, err1 := strconv.ParseUint(string(b[:16]), 16, 64)
	nsec, err2 := strconv.ParseUint(string(b[16:24]), 16, 32)
	if err1 != nil || err2 != nil || nsec >= 1e9 {
		return st, fmt.Errorf("bad job registration at %s", path)
	}
	st.Spec, st.Since = string(b[24:]), time.Unix(int64(sec^1<<63), int64(nsec)).UTC()
	return st, nil
}

// readSpec reads the registration of the escaped job; none is the zero
// state.
func (s *Store) readSpec(job string) (ledger.JobState, error) {
	path := s.specsDir() + "/" + job
	b, _, err := s.conn.Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return ledger.JobState{}, nil
	}
	if err != nil {
		return ledger.JobState{}, fmt.Errorf("read %s: %w", path, err)
	}
	return parseSpec(path, b)
}

// register makes the registration of the escaped job spec from since,
// unless it is spec already, and returns the registration after it.
func (s *Store) register(job, spec string, since time.Time) (ledger.JobState, error) {
	path := s.specsDir() + "/" + job
	data := []byte(tickHex(since) + spec)
	for range stateRounds {
		b, st, err := s.conn.Get(path)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			_, err = s.conn.Create(path, data, zk.FlagPersistent, s.acl)
			if errors.Is(err, zk.ErrNoNode) {
				if err := s.ensureNode(s.specsDir(), false); err != nil {
					return ledger.JobState{}, err
				}
				continue
			}
		case err != nil:
			return ledger.JobState{}, fmt.Errorf("read %s: %w", path, err)
		default:
			if cur, perr := parseSpec(path, b); perr == nil && cur.Spec == spec {
				return cur, nil
			}
			_, err = s.conn.Set(path, data, st.Version)
		}
		switch {
		case err == nil:
			return parseSpec(path, data)
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrNodeExists):
			continue // another writer came between
		}
		return ledger.JobState{}, fmt.Errorf("write %s: %w", path, err)
	}
	return ledger.JobState{}, fmt.Errorf("write %s: it kept changing", path)
}

// JobStates implements ledger.Ledger: one read of Root/%ledger/jobs.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: job states: %w", err)
	}
	m, err := call(ctx, s.readStates, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: job states: %w", err)
	}
	out := make([]ledger.JobState, 0, len(m))
	for ej, j := range m {
		if job, ok := unescapeName(ej); ok && j != nil {
			out = append(out, j.state(job))
		}
	}
	return out, nil
}

// Jobs implements ledger.Ledger: a read of Root/%ledger/jobs alongside a
// listing of Root/%ledger/specs, then a read of each registration,
// pipelined.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: jobs: %w", err)
	}
	out, err := call(ctx, s.jobs, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: jobs: %w", err)
	}
	return out, nil
}

func (s *Store) jobs() ([]ledger.JobState, error) {
	var (
		m         statesData
		names     []string
		err, err2 error
	)
	parallel(2, func(i int) {
		if i == 0 {
			m, err = s.readStates()
			return
		}
		names, _, err2 = s.conn.Children(s.specsDir())
		if errors.Is(err2, zk.ErrNoNode) {
			err2 = nil
		}
	})
	if err = errors.Join(err, err2); err != nil {
		return nil, err
	}
	out := make([]ledger.JobState, 0, len(m)+len(names))
	index := make(map[string]int, len(m)+len(names))
	for ej, j := range m {
		if job, ok := unescapeName(ej); ok && j != nil {
			index[ej] = len(out)
			out = append(out, j.state(job))
		}
	}
	for i, rn := range s.readRaw(s.specsDir(), names) {
		if errors.Is(rn.err, zk.ErrNoNode) {
			continue // forgotten meanwhile
		}
		if rn.err != nil {
			return nil, fmt.Errorf("read %s/%s: %w", s.specsDir(), names[i], rn.err)
		}
		job, ok := unescapeName(names[i])
		if !ok {
			continue
		}
		reg, err := parseSpec(s.specsDir()+"/"+names[i], rn.data)
		if err != nil {
			return nil, err
		}
		k, ok := index[names[i]]
		if !ok {
			k = len(out)
			out = append(out, ledger.JobState{Job: job})
		}
		out[k].Spec, out[k].Since = reg.Spec, reg.Since
	}
	return out, nil
}

// Prune implements ledger.Ledger; see the package documentation for its
// cost. The server's time (for claim retention and ages) is read once, by
// a write of Root's data.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return ledger.PruneResult{}, fmt.Errorf("zkstore: prune: %w", err)
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return ledger.PruneResult{}, errors.New("zkstore: prune: negative parameter")
	}
	res, err := call(ctx, func() (ledger.PruneResult, error) { return s.prune(p) }, nil)
	if err != nil {
		return res, fmt.Errorf("zkstore: prune: %w", err)
	}
	return res, nil
}

func (s *Store) prune(p ledger.PruneParams) (ledger.PruneResult, error) {
	var res ledger.PruneResult
	now, err := s.serverNow()
	if errors.Is(err, zk.ErrNoNode) {
		return res, nil // no Root: nothing was ever stored
	}
	if err != nil {
		return res, fmt.Errorf("read the server's time: %w", err)
	}
	if res.Claims, err = s.pruneClaims(now); err != nil {
		return res, err
	}
	if p.RunsOlderThan > 0 || p.KeepPerJob > 0 {
		if res.Runs, err = s.pruneRuns(now, p); err != nil {
			return res, err
		}
	}
	if p.TriggersOlderThan > 0 {
		cutoff := now - p.TriggersOlderThan.Milliseconds()
		_, err := s.updateStates(false, func(m statesData, _ int64) bool {
			n := 0
			for job, j := range m {
				before := len(j.Triggers)
				j.Triggers = slices.DeleteFunc(j.Triggers, func(t triggerData) bool { return t.At < cutoff })
				n += before - len(j.Triggers)
				if !j.Paused && len(j.Triggers) == 0 {
					delete(m, job)
				}
			}
			res.Triggers = n
			return n > 0
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// pruneClaims deletes the claims expired at the server's time now (ms),
// each job's in guarded multis (see takeOver), and counts them.
func (s *Store) pruneClaims(now int64) (int, error) {
	jobs, _, err := s.conn.Children(s.claimsDir())
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", s.claimsDir(), err)
	}
	counts := make([]int, len(jobs))
	errs := make([]error, len(jobs))
	parallel(len(jobs), func(i int) {
		counts[i], errs[i] = s.pruneJobClaims(s.claimsDir()+"/"+jobs[i], now)
	})
	total := 0
	for _, n := range counts {
		total += n
	}
	return total, errors.Join(errs...)
}

func (s *Store) pruneJobClaims(dir string, now int64) (int, error) {
	deleted := 0
	for range 4 {
		// The guard first, then the claims: see takeOver.
		version, ok, err := s.readGuard(dir)
		if err != nil || !ok {
			return deleted, err
		}
		names, _, err := s.conn.Children(dir)
		if err != nil {
			return deleted, fmt.Errorf("list %s: %w", dir, err)
		}
		var expired []string
		for i, rn := range s.readRaw(dir, names) {
			if rn.err == nil {
				if _, ok := claimExpired(rn.data, rn.stat, now); ok {
					expired = append(expired, names[i])
				}
			} else if !errors.Is(rn.err, zk.ErrNoNode) {
				return deleted, fmt.Errorf("read %s/%s: %w", dir, names[i], rn.err)
			}
		}
		raced := false
		for lo := 0; lo < len(expired) && !raced; lo += pruneChunk {
			chunk := expired[lo:min(lo+pruneChunk, len(expired))]
			ops := []any{&zk.CheckVersionRequest{Path: dir, Version: version}}
			for _, name := range chunk {
				ops = append(ops, &zk.DeleteRequest{Path: dir + "/" + name, Version: -1})
			}
			ops = append(ops, &zk.SetDataRequest{Path: dir, Version: -1})
			_, err := s.conn.Multi(ops...)
			switch {
			case err == nil:
				deleted += len(chunk)
				version++
			case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
				raced = true // another pruner or a takeover came between: look again
			default:
				return deleted, fmt.Errorf("delete %d claims in %s: %w", len(chunk), dir, err)
			}
		}
		if !raced {
			return deleted, nil
		}
	}
	return deleted, nil
}

// pruneRuns deletes the run records beyond each job's newest keep, and
// those last written more than RunsOlderThan before the server's time now
// (ms), and counts them.
func (s *Store) pruneRuns(now int64, p ledger.PruneParams) (int, error) {
	jobs, err := s.runJobs("")
	if err != nil {
		return 0, err
	}
	lists, err := s.listRuns(jobs, nil)
	if err != nil {
		return 0, err
	}
	cutoff := now - p.RunsOlderThan.Milliseconds()
	total := 0
	var errs []error
	for _, list := range lists {
		slices.SortFunc(list, func(a, b runNode) int { return a.key.Compare(b.key) })
		var del []runNode
		if p.KeepPerJob > 0 && len(list) > p.KeepPerJob {
			list, del = list[:p.KeepPerJob], list[p.KeepPerJob:]
		}
		versions := make([]int32, len(del), len(del)+len(list))
		for i := range versions {
			versions[i] = -1
		}
		if p.RunsOlderThan > 0 {
			stats := make([]*zk.Stat, len(list))
			found := make([]bool, len(list))
			parallel(len(list), func(i int) {
				var err error
				found[i], stats[i], err = s.conn.Exists(list[i].path)
				found[i] = found[i] && err == nil
			})
			for i, st := range stats {
				if found[i] && st.Mtime < cutoff {
					del = append(del, list[i])
					versions = append(versions, st.Version) // not if written again since
				}
			}
		}
		done := make([]error, len(del))
		parallel(len(del), func(i int) { done[i] = s.conn.Delete(del[i].path, versions[i]) })
		for _, err := range done {
			switch {
			case err == nil:
				total++
			case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion):
			default:
				errs = append(errs, err)
			}
		}
	}
	return total, errors.Join(errs...)
}
