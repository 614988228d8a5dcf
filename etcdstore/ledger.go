package etcdstore

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

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

// The ledger's keys all start with Prefix + ledgerMark. 0xff never occurs
// in valid UTF-8, and lock keys, tokens and Prefix are valid UTF-8, so every
// lock entry sorts before Prefix + ledgerMark and no lock key's prefix
// covers a ledger key: Leases and Subscribe read and watch the range
// [Prefix, Prefix + ledgerMark) only, and Acquire, Enqueue and ForceRelease
// work under Prefix + escaped key + "/".
const ledgerMark = "\xff"

// Sub-prefixes of the ledger (after Prefix + ledgerMark + "ledger/"). Each
// holds a "/", so parseKey would reject a ledger key even if it saw one.
const (
	claimsDir = "c/"
	runsDir   = "r/"
	jobsDir   = "j/"
	marksDir  = "m/"
	specsDir  = "s/"
	// runningDir holds a marker per running record (ledger.RunRunning):
	// runningDir + the record key's part after runsDir, empty.
	runningDir = "u/"
)

// Limits of the ledger.
const (
	// maxLeaseTTL is etcd's largest lease TTL (lease.MaxLeaseTTL, s).
	maxLeaseTTL = 9_000_000_000
	// markTTL is the TTL of an age mark's lease: the longest
	// RunsOlderThan or TriggersOlderThan a Prune can honour.
	markTTL = 10 * 366 * 24 * time.Hour
	// markEvery is how often at most a Store grants an age mark after a
	// write whose age Prune judges (a run record, a trigger request).
	markEvery = time.Second
	// markDensity: Prune keeps age marks about age/markDensity apart.
	markDensity = 16
	// maxRevokes bounds the mark leases one Prune revokes.
	maxRevokes = 512
	// claimSlackMin and claimSlackMax bound how much longer than Retain a
	// claim's lease lives: Retain/8 within these bounds.
	claimSlackMin = time.Second
	claimSlackMax = time.Minute
	// claimHeadroom is the time a claim's lease must still have beyond
	// Retain when the claim is sent, so that it covers the call itself.
	claimHeadroom = 200 * time.Millisecond
)

// ledgerState is the local part of a Store's ledger: the leases its claims
// go on and when it last granted an age mark.
type ledgerState struct {
	mu       sync.Mutex
	buckets  map[int64]*claimLease // by Retain, whole seconds rounded up
	lastMark time.Time             // when the last age mark was granted (monotonic)
	marking  bool                  // a mark is being granted
}

// claimLease is the etcd lease the claims of one retention bucket go on,
// shared until too little of it is left.
type claimLease struct {
	mu   sync.Mutex // held while a new lease is granted
	id   clientv3.LeaseID
	sent time.Time     // when its grant was sent (monotonic); zero: none yet
	ttl  time.Duration // as granted
}

func (s *Store) ledgerKey(dir string) string { return s.prefix + ledgerMark + "ledger/" + dir }

// enc makes s safe to end with 0x00 in a key and keeps its order: 0x00
// becomes 0x01 0x01 and 0x01 becomes 0x01 0x02, so enc(a)+"\x00" <
// enc(b)+"\x00" exactly when a < b.
func enc(s string) string {
	if strings.IndexByte(s, 0) < 0 && strings.IndexByte(s, 1) < 0 {
		return s
	}
	return encoder.Replace(s)
}

func dec(s string) string {
	if strings.IndexByte(s, 1) < 0 {
		return s
	}
	return decoder.Replace(s)
}

var (
	encoder = strings.NewReplacer("\x01", "\x01\x02", "\x00", "\x01\x01")
	decoder = strings.NewReplacer("\x01\x02", "\x01", "\x01\x01", "\x00")
)

// tickText is an instant as fixed-width hex, in time order: the Unix
// seconds offset by 2^63, then the nanoseconds.
func tickText(t time.Time) string {
	var b [24]byte
	sec := uint64(t.Unix()) ^ 1<<63
	putHex(b[:16], sec)
	putHex(b[16:], uint64(t.Nanosecond()))
	return string(b[:])
}

// invTickText is tickText in reverse time order.
func invTickText(t time.Time) string {
	var b [24]byte
	putHex(b[:16], ^(uint64(t.Unix()) ^ 1<<63))
	putHex(b[16:], uint64(999_999_999-t.Nanosecond()))
	return string(b[:])
}

func putHex(b []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
}

// claimKey is the key of the claim (job, tick, trigger, shard). Shard 0
// has no suffix, so that claims made before shards existed are shard 0's;
// another shard adds "\x00" and its number in decimal, which no shard 0
// key holds (enc leaves no 0x00 in the trigger).
func (s *Store) claimKey(job string, tick time.Time, trigger string, shard int) string {
	k := s.ledgerKey(claimsDir) + enc(job) + "\x00" + tickText(tick) + enc(trigger)
	if shard != 0 {
		k += "\x00" + strconv.Itoa(shard)
	}
	return k
}

// runJobPrefix is the prefix of job's run records.
func (s *Store) runJobPrefix(job string) string {
	return s.ledgerKey(runsDir) + enc(job) + "\x00"
}

// runKey is the key of a run record: within its job, keys sort as Runs
// lists records (tick descending, then trigger and shard ascending, then
// attempt descending). The attempt, reversed, is 8 hex digits starting
// with '7' to 'f' (Attempt is at most 2^31). Shard 0 has no mark of its
// own, so that records written before shards existed are shard 0's keys;
// another shard is "~" and the shard in 4 hex digits before the attempt:
// '~' sorts after every hex digit, so shard 0's records come first, and
// fixed-width digits keep the others in order.
func (s *Store) runKey(k ledger.RunKey) string {
	key := s.runJobPrefix(k.Job) + invTickText(k.Tick) + enc(k.Trigger) + "\x00"
	if k.Shard != 0 {
		key += fmt.Sprintf("~%04x", k.Shard)
	}
	return key + strconv.FormatUint(uint64(^uint32(k.Attempt)), 16)
}

// markerKey is the running marker of the record at key runKey. RecordRuns
// puts it in the Txn that writes a running record and deletes it in the
// one that writes any other, so that it exists exactly while its record is
// running, unless the record was deleted by hand since (Prune deletes the
// markers of the records it deletes).
func (s *Store) markerKey(runKey string) string {
	return s.ledgerKey(runningDir) + runKey[len(s.ledgerKey(runsDir)):]
}

// jobPrefix is the prefix of job's state keys: jobPrefix+"p" exists while
// it is paused, jobPrefix+"t"+ID for each pending trigger request.
func (s *Store) jobPrefix(job string) string {
	return s.ledgerKey(jobsDir) + enc(job) + "\x00"
}

// specKey is the key of job's registration: its value is tickText(Since)
// followed by Spec. It is apart from the job state keys, which JobStates
// reads whole, so that registered jobs do not make that read grow.
func (s *Store) specKey(job string) string {
	return s.ledgerKey(specsDir) + enc(job)
}

// triggerValue is the value of a trigger request's key: its At (RFC 3339,
// UTC), then for a backfill or a re-run a space and the Tick to run (RFC
// 3339, UTC), then for a re-run " rerun"; for a cancel request, " cancel "
// and its CancelField last (it may hold spaces). A trigger-now's value is
// its At alone, as before TriggerRequest had a Tick.
func triggerValue(at time.Time, tr ledger.TriggerRequest) string {
	v := at.UTC().Round(0).Format(time.RFC3339Nano)
	if !tr.Tick.IsZero() {
		v += " " + tr.Tick.UTC().Format(time.RFC3339Nano)
		if tr.Rerun {
			v += " rerun"
		}
	}
	if tr.Cancel {
		v += " cancel " + tr.CancelField()
	}
	return v
}

// parseTrigger reads a triggerValue (without the ID).
func parseTrigger(v string) (ledger.TriggerRequest, error) {
	var tr ledger.TriggerRequest
	v, cancel, isCancel := strings.Cut(v, " cancel ")
	if isCancel {
		if err := tr.SetCancelField(cancel); err != nil {
			return tr, err
		}
	}
	f := strings.Split(v, " ")
	if len(f) > 3 || (len(f) == 3 && f[2] != "rerun") {
		return tr, fmt.Errorf("bad value %q", v)
	}
	var err error
	if tr.At, err = time.Parse(time.RFC3339Nano, f[0]); err != nil {
		return tr, err
	}
	if len(f) > 1 {
		if tr.Tick, err = time.Parse(time.RFC3339Nano, f[1]); err != nil {
			return tr, err
		}
		tr.Tick = tr.Tick.UTC()
		tr.Rerun = len(f) == 3
	}
	return tr, nil
}

// parseTickText reads a tickText.
func parseTickText(t string) (time.Time, error) {
	if len(t) != 24 {
		return time.Time{}, errors.New("bad time")
	}
	sec, err1 := strconv.ParseUint(t[:16], 16, 64)
	nsec, err2 := strconv.ParseUint(t[16:], 16, 64)
	if err1 != nil || err2 != nil || nsec >= 1e9 {
		return time.Time{}, errors.New("bad time")
	}
	return time.Unix(int64(sec^1<<63), int64(nsec)).UTC(), nil
}

// parseSpec sets st's registration from the value of its registration key.
func parseSpec(st *ledger.JobState, kv *mvccpb.KeyValue) error {
	v := string(kv.Value)
	if len(v) <= 24 {
		return fmt.Errorf("etcdstore: bad job registration at %q", kv.Key)
	}
	since, err := parseTickText(v[:24])
	if err != nil {
		return fmt.Errorf("etcdstore: bad job registration at %q: %w", kv.Key, err)
	}
	st.Spec, st.Since = v[24:], since
	return nil
}

// checkName rejects names the ledger cannot store.
func checkName(what, name string) error {
	if len(name) > 64<<10 {
		return fmt.Errorf("etcdstore: %s is %d bytes long: %w", what, len(name), ledger.ErrUnsupported)
	}
	return nil
}

// Claim implements ledger.Ledger. The claims go to etcd in Txns of up to
// Store's Txn size less two claims each, one after the other (one round
// trip for up to 126 claims with etcd's default --max-txn-ops). Each claim
// is a nested Txn: put the key if it does not exist; else put it again if
// it holds this very claim (the same token and node: a repeated call), so
// that it moves to a lease that covers Retain from now; else read it. A
// claim's key lives on a lease shared by the claims of its retention
// bucket (Retain in whole seconds); see the package documentation.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: claim: %w", err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	for i := range ps {
		if err := checkClaim(&ps[i]); err != nil {
			return nil, err
		}
	}
	res := make([]error, len(ps))
	// first[i] is the index of the first claim of ps[i]'s key; only first
	// claims go to etcd, in chunks per retention bucket.
	first := make([]int, len(ps))
	keys := make([]string, len(ps))
	seen := make(map[string]int, len(ps))
	todo := make([]int, 0, len(ps))
	for i, p := range ps {
		keys[i] = s.claimKey(p.Job, p.Tick, p.Trigger, p.Shard)
		if j, ok := seen[keys[i]]; ok {
			first[i] = j
			continue
		}
		seen[keys[i]] = i
		first[i] = i
		todo = append(todo, i)
	}
	holder := make([]claimHolder, len(ps))
	for attempt := 0; len(todo) > 0; attempt++ {
		if attempt == 3 {
			return nil, errors.New("etcdstore: claim: could not put the claims on a lease that covers Retain (calls too slow)")
		}
		again, err := s.claimBatch(ctx, ps, keys, todo, holder, attempt > 0)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: claim %d ticks: %w", len(todo), err)
		}
		todo = again
	}
	for i, p := range ps {
		h := holder[first[i]]
		if h.token != p.Token {
			res[i] = &ledger.ClaimedError{Node: h.node}
		}
	}
	return res, nil
}

// claimHolder is who holds a claim's key after Claim.
type claimHolder struct{ token, node string }

func checkClaim(p *ledger.ClaimParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("etcdstore: %w", err)
	}
	switch {
	case p.Retain > maxLeaseTTL*time.Second/2:
		return fmt.Errorf("etcdstore: claim %q: Retain %v is longer than an etcd lease can live: %w", p.Job, p.Retain, ledger.ErrUnsupported)
	case strings.IndexByte(p.Token, '\n') >= 0:
		return fmt.Errorf("etcdstore: claim %q: Token contains a newline: %w", p.Job, ledger.ErrUnsupported)
	}
	if err := checkName("Job", p.Job); err != nil {
		return err
	}
	if err := checkName("Trigger", p.Trigger); err != nil {
		return err
	}
	return checkName("Node", p.Node)
}

// claimBatch sends the claims todo (indexes into ps) and fills holder. It
// returns the claims this token holds on a lease that may end before
// Retain from now (the call took longer than the lease had to spare):
// they must be sent again, on a new lease (fresh set).
func (s *Store) claimBatch(ctx context.Context, ps []ledger.ClaimParams, keys []string, todo []int, holder []claimHolder, fresh bool) ([]int, error) {
	type leased struct {
		cl      *claimLease
		id      clientv3.LeaseID
		expires time.Time // the lease lives at etcd at least until then (local monotonic clock)
	}
	leases := map[int64]leased{}
	for _, i := range todo {
		sec := retainSecs(ps[i].Retain)
		if _, ok := leases[sec]; ok {
			continue
		}
		cl, id, exp, err := s.claimLease(ctx, sec, fresh)
		if err != nil {
			return nil, err
		}
		leases[sec] = leased{cl, id, exp}
	}
	var again []int
	for lo := 0; lo < len(todo); {
		n := min(len(todo)-lo, max(int(s.txnOps.Load())-2, 1))
		chunk := todo[lo : lo+n]
		ops := make([]clientv3.Op, n)
		for j, i := range chunk {
			p := &ps[i]
			k, v := keys[i], p.Token+"\n"+p.Node
			put := clientv3.OpPut(k, v, clientv3.WithLease(leases[retainSecs(p.Retain)].id))
			ops[j] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{put},
				[]clientv3.Op{clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", v)},
					[]clientv3.Op{put},
					[]clientv3.Op{clientv3.OpGet(k)},
				)},
			)
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n+2) {
			continue
		}
		if isLeaseGone(err) {
			// A claim lease was revoked or expired under us: start again
			// on new ones.
			for _, l := range leases {
				l.cl.drop(l.id)
			}
			return todo[lo:], nil
		}
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for j, i := range chunk {
			p := &ps[i]
			h, mine, err := claimResult(resp.Responses[j])
			if err != nil {
				return nil, err
			}
			if mine {
				h = claimHolder{token: p.Token, node: p.Node}
			}
			holder[i] = h
			if mine && !now.Add(p.Retain).Before(leases[retainSecs(p.Retain)].expires) {
				again = append(again, i)
			}
		}
		lo += n
	}
	return again, nil
}

// claimResult reads one claim's nested Txn response: the holder, and
// whether this call put the key.
func claimResult(r *pb.ResponseOp) (claimHolder, bool, error) {
	t := r.GetResponseTxn()
	if t == nil {
		return claimHolder{}, false, errors.New("unexpected Txn response")
	}
	if t.Succeeded {
		return claimHolder{}, true, nil
	}
	if len(t.Responses) == 0 || t.Responses[0].GetResponseTxn() == nil {
		return claimHolder{}, false, errors.New("unexpected nested Txn response")
	}
	t = t.Responses[0].GetResponseTxn()
	if t.Succeeded {
		return claimHolder{}, true, nil
	}
	kvs := t.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return claimHolder{}, false, errors.New("claim key vanished inside a Txn")
	}
	tok, node, _ := strings.Cut(string(kvs[0].Value), "\n")
	return claimHolder{token: tok, node: node}, false, nil
}

// retainSecs is Retain in whole seconds, rounded up.
func retainSecs(d time.Duration) int64 { return driver.Units(d, time.Second) }

// claimLease returns the lease for claims retained up to sec seconds, and
// until when it lives at least (on the local monotonic clock, less 1% for
// clock rate errors), granting a new one when the current one has less
// than sec seconds plus claimHeadroom left, or when fresh is set and it was
// granted before the call began. A lease lives sec seconds plus a slack of
// sec/8 (within claimSlackMin and claimSlackMax) plus sec/50 (covering the
// 1% allowed for rates) plus claimHeadroom, and is used for claims until
// less than sec seconds plus claimHeadroom of it are left.
func (s *Store) claimLease(ctx context.Context, sec int64, fresh bool) (*claimLease, clientv3.LeaseID, time.Time, error) {
	d := time.Duration(sec) * time.Second
	s.ledger.mu.Lock()
	if s.ledger.buckets == nil {
		s.ledger.buckets = make(map[int64]*claimLease)
	}
	cl := s.ledger.buckets[sec]
	if cl == nil {
		cl = &claimLease{}
		s.ledger.buckets[sec] = cl
	}
	s.ledger.mu.Unlock()
	start := time.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	exp := cl.sent.Add(cl.ttl - cl.ttl/100)
	if !cl.sent.IsZero() && !(fresh && cl.sent.Before(start)) && start.Add(d+claimHeadroom).Before(exp) {
		return cl, cl.id, exp, nil
	}
	slack := min(max(d/8, claimSlackMin), claimSlackMax) + d/50
	ttl := retainSecs(d + slack + claimHeadroom)
	sent := time.Now()
	resp, err := s.c.Grant(ctx, ttl)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("grant a %ds claim lease: %w", ttl, err)
	}
	cl.id, cl.sent, cl.ttl = resp.ID, sent, time.Duration(resp.TTL)*time.Second
	return cl, cl.id, cl.sent.Add(cl.ttl - cl.ttl/100), nil
}

// drop forgets lease id if it is still the current one.
func (cl *claimLease) drop(id clientv3.LeaseID) {
	cl.mu.Lock()
	if cl.id == id {
		cl.sent = time.Time{}
	}
	cl.mu.Unlock()
}

// open returns ErrClosed after Close.
func (s *Store) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// runValue is a run record as stored (JSON).
type runValue struct {
	Job      string           `json:"j"`
	Tick     time.Time        `json:"t"`
	Trigger  string           `json:"g,omitempty"`
	Shard    int              `json:"sh,omitempty"` // absent in records written before shards: 0
	Shards   int              `json:"ss,omitempty"`
	Attempt  int              `json:"a"`
	Node     string           `json:"n,omitempty"`
	Fence    uint64           `json:"f,omitempty"`
	Start    time.Time        `json:"s"`
	End      time.Time        `json:"e"`
	Status   ledger.RunStatus `json:"st"`
	Error    string           `json:"er,omitempty"`
	Output   string           `json:"o,omitempty"`
	Recorded time.Time        `json:"r"`
}

// RecordRuns implements ledger.Ledger: one Txn per half a Txn size of
// records (one round trip for up to 64), each record a put and a put or
// delete of its running marker. Recorded is the Store's wall
// clock (see the package documentation: etcd has none a client can read);
// Prune judges ages by etcd's clock instead, through the age mark this
// call grants when the Store granted none in the last second (a
// LeaseGrant and a Put after the records are written).
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdstore: record runs: %w", err)
	}
	if len(rs) == 0 {
		return nil
	}
	if err := s.open(); err != nil {
		return err
	}
	now := time.Now().UTC().Round(0)
	type put struct {
		val     string
		running bool
	}
	puts := make(map[string]put, len(rs))
	order := make([]string, 0, len(rs))
	for _, r := range rs {
		switch {
		case r.Job == "" || r.Tick.IsZero():
			return errors.New("etcdstore: record run: empty Job or zero Tick")
		case r.Attempt < 0 || int64(r.Attempt) > 1<<31:
			return fmt.Errorf("etcdstore: record run %q: Attempt %d out of range", r.Job, r.Attempt)
		case r.Shard < 0 || r.Shard >= ledger.MaxShards:
			return fmt.Errorf("etcdstore: record run %q: Shard %d is not in [0, %d)", r.Job, r.Shard, ledger.MaxShards)
		}
		if err := checkName("Job", r.Job); err != nil {
			return err
		}
		v, err := json.Marshal(runValue{
			Job: r.Job, Tick: r.Tick.UTC(), Trigger: r.Trigger, Shard: r.Shard, Shards: r.Shards, Attempt: r.Attempt, Node: r.Node, Fence: r.Fence,
			Start: r.Start.Round(0), End: r.End.Round(0), Status: r.Status, Error: r.Error, Output: r.Output, Recorded: now,
		})
		if err != nil {
			return fmt.Errorf("etcdstore: record run %q: %w", r.Job, err)
		}
		k := s.runKey(r.Key())
		if _, dup := puts[k]; !dup {
			order = append(order, k)
		}
		puts[k] = put{string(v), r.Status == ledger.RunRunning} // the last record with a key wins
	}
	for lo := 0; lo < len(order); {
		n := min(len(order)-lo, max(int(s.txnOps.Load())/2, 1))
		// etcd refuses a request over --max-request-bytes (1.5 MiB by
		// default): a batch holds at most maxTxnBytes of records, and at
		// least one.
		size := 0
		for i, k := range order[lo : lo+n] {
			size += 2*len(k) + len(puts[k].val) + 64
			if i > 0 && size > maxTxnBytes {
				n = i
				break
			}
		}
		ops := make([]clientv3.Op, 0, 2*n)
		for _, k := range order[lo : lo+n] {
			ops = append(ops, clientv3.OpPut(k, puts[k].val))
			if puts[k].running {
				ops = append(ops, clientv3.OpPut(s.markerKey(k), ""))
			} else {
				ops = append(ops, clientv3.OpDelete(s.markerKey(k)))
			}
		}
		_, err := s.c.Txn(ctx).Then(ops...).Commit()
		if n > 1 && s.tooManyOps(err, 2*n) {
			continue
		}
		if err != nil {
			return fmt.Errorf("etcdstore: record %d runs: %w", len(rs), err)
		}
		lo += n
	}
	s.mark(ctx, markEvery)
	return nil
}

// maxTxnBytes bounds the keys and values of one RecordRuns transaction:
// under etcd's default --max-request-bytes (1.5 MiB), with room for the
// request's own overhead.
const maxTxnBytes = 1 << 20

// mark grants an age mark, unless this Store granted one less than every
// ago or is granting one: a lease of markTTL, and a key under
// marksDir named by the revision the grant was applied at, on that lease,
// holding the Store's wall clock (a hint for thinning, never a decision).
// Every key written at or before that revision is at least as old as the
// lease, by etcd's clock. Failures are dropped: a later mark covers what
// this one would have.
func (s *Store) mark(ctx context.Context, every time.Duration) {
	ls := &s.ledger
	ls.mu.Lock()
	if every > 0 && (ls.marking || (!ls.lastMark.IsZero() && time.Since(ls.lastMark) < every)) {
		ls.mu.Unlock()
		return
	}
	ls.marking = true
	ls.mu.Unlock()
	ok := false
	defer func() {
		ls.mu.Lock()
		ls.marking = false
		if ok {
			ls.lastMark = time.Now()
		}
		ls.mu.Unlock()
	}()
	resp, err := s.c.Grant(ctx, int64(markTTL/time.Second))
	if err != nil || resp.ResponseHeader == nil {
		return
	}
	k := s.ledgerKey(marksDir) + fmt.Sprintf("%016x", resp.Revision)
	v := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if _, err := s.c.Put(ctx, k, v, clientv3.WithLease(resp.ID)); err != nil {
		rctx, cancel := context.WithTimeout(s.ctx, s.ttl)
		_, _ = s.c.Revoke(rctx, resp.ID) // else it would linger for markTTL
		cancel()
		return
	}
	ok = true
}

// Runs implements ledger.Ledger. For one job it is one range read of that
// job's records between the query's bounds (more, a page at a time, when
// Status filters them). For every job's running records (the schedulers'
// sweep), see runningRuns: the running markers and those records only.
// For every job otherwise, one range read of every record, sorted here.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: runs: %w", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("etcdstore: runs: negative Limit %d", q.Limit)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if q.Job == "" && q.Status == ledger.RunRunning {
		return s.runningRuns(ctx, &q)
	}
	var out []ledger.RunRecord
	if q.Job == "" {
		resp, err := s.c.Get(ctx, s.ledgerKey(runsDir), clientv3.WithPrefix())
		if err != nil {
			return nil, fmt.Errorf("etcdstore: runs: %w", err)
		}
		if out, err = appendRuns(out, resp.Kvs, &q); err != nil {
			return nil, err
		}
		slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
		if q.Limit > 0 && len(out) > q.Limit {
			out = out[:q.Limit]
		}
		return out, nil
	}
	jp := s.runJobPrefix(q.Job)
	from, end := jp, clientv3.GetPrefixRangeEnd(jp)
	if !q.To.IsZero() {
		from = max(from, clientv3.GetPrefixRangeEnd(jp+invTickText(q.To)))
	}
	if !q.From.IsZero() {
		end = min(end, clientv3.GetPrefixRangeEnd(jp+invTickText(q.From)))
	}
	if b := q.Before; b != nil {
		switch c := strings.Compare(q.Job, b.Job); {
		case c > 0: // ticks at or before Before's
			from = max(from, jp+invTickText(b.Tick))
		case c < 0: // ticks before Before's
			from = max(from, clientv3.GetPrefixRangeEnd(jp+invTickText(b.Tick)))
		default:
			from = max(from, s.runKey(*b)+"\x00")
		}
	}
	page := int64(0)
	if q.Limit > 0 {
		page = int64(q.Limit)
		if q.Status != "" {
			page = max(4*page, 256)
		}
	}
	for from < end {
		opts := []clientv3.OpOption{clientv3.WithRange(end)}
		if page > 0 {
			opts = append(opts, clientv3.WithLimit(page))
		}
		resp, err := s.c.Get(ctx, from, opts...)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: runs of %q: %w", q.Job, err)
		}
		if out, err = appendRuns(out, resp.Kvs, &q); err != nil {
			return nil, err
		}
		if q.Limit > 0 && len(out) >= q.Limit {
			return out[:q.Limit], nil
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return out, nil
}

// runningRuns is Runs of every job's running records: a keys-only range
// read of the running markers, then the records they name, one Txn of Gets
// per Txn size of markers, sorted here. Markers whose record is gone or
// final are deleted afterwards (best effort, one more Txn per Txn size
// of them), each only while its record is as read.
func (s *Store) runningRuns(ctx context.Context, q *ledger.RunQuery) ([]ledger.RunRecord, error) {
	dir, runs := s.ledgerKey(runningDir), s.ledgerKey(runsDir)
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: runs: read running markers: %w", err)
	}
	var out []ledger.RunRecord
	var stale []staleMarker
	for lo := 0; lo < len(resp.Kvs); {
		n := min(len(resp.Kvs)-lo, int(s.txnOps.Load()))
		ops := make([]clientv3.Op, n)
		for j, kv := range resp.Kvs[lo : lo+n] {
			ops[j] = clientv3.OpGet(runs + string(kv.Key[len(dir):]))
		}
		tr, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("etcdstore: runs: read %d running records: %w", n, err)
		}
		for j, r := range tr.Responses {
			m := string(resp.Kvs[lo+j].Key)
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				stale = append(stale, staleMarker{marker: m, record: runs + m[len(dir):]})
				continue
			}
			rec, err := parseRun(kvs[0])
			if err != nil {
				return nil, err
			}
			if rec.Status != ledger.RunRunning {
				stale = append(stale, staleMarker{marker: m, record: string(kvs[0].Key), rev: kvs[0].ModRevision})
				continue
			}
			if q.Matches(&rec) {
				out = append(out, rec)
			}
		}
		lo += n
	}
	s.dropMarkers(ctx, stale)
	slices.SortFunc(out, func(a, b ledger.RunRecord) int { return a.Key().Compare(b.Key()) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// staleMarker is a running marker whose record was read gone (rev 0) or
// final (at mod revision rev).
type staleMarker struct {
	marker, record string
	rev            int64
}

// dropMarkers deletes the stale markers whose record is still as read (a
// record written running again since keeps its new marker), in Txns of
// nested Txns. Failures are dropped: a marker left costs the next sweep a
// read.
func (s *Store) dropMarkers(ctx context.Context, ms []staleMarker) {
	for lo := 0; lo < len(ms); {
		n := min(len(ms)-lo, max(int(s.txnOps.Load())-1, 1))
		ops := make([]clientv3.Op, n)
		for j, m := range ms[lo : lo+n] {
			ops[j] = clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(m.record), "=", m.rev)},
				[]clientv3.Op{clientv3.OpDelete(m.marker)}, nil)
		}
		_, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n+1) {
			continue
		}
		if err != nil {
			return
		}
		lo += n
	}
}

// appendRuns appends the records in kvs that match q to out.
func appendRuns(out []ledger.RunRecord, kvs []*mvccpb.KeyValue, q *ledger.RunQuery) ([]ledger.RunRecord, error) {
	for _, kv := range kvs {
		r, err := parseRun(kv)
		if err != nil {
			return nil, err
		}
		if q.Matches(&r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func parseRun(kv *mvccpb.KeyValue) (ledger.RunRecord, error) {
	var v runValue
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return ledger.RunRecord{}, fmt.Errorf("etcdstore: runs: bad record at %q: %w", kv.Key, err)
	}
	return ledger.RunRecord{
		Job: v.Job, Tick: v.Tick, Trigger: v.Trigger, Shard: v.Shard, Shards: v.Shards, Attempt: v.Attempt, Node: v.Node, Fence: v.Fence,
		Start: v.Start, End: v.End, Status: v.Status, Error: v.Error, Output: v.Output, Recorded: v.Recorded,
	}, nil
}

// SetJobState implements ledger.Ledger: one Txn that makes the change and
// reads the job's state after it. A new trigger request is stamped with the
// Store's wall clock (etcd has none a client can read) and ordered by its
// key's create revision; each new one is followed by an age mark, as in
// RecordRuns but whatever the time since the last (trigger requests are
// few, and TriggersOlderThan may be short): two more round trips.
// JobRegister reads the registration in one Txn, and only when its spec
// differs writes it in a second, guarded by the registration's revision
// (and read again when another node wrote it meanwhile). Since is kept to
// the nanosecond.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, fmt.Errorf("etcdstore: set job state: %w", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("etcdstore: %w", err)
	}
	if err := checkName("Job", p.Job); err != nil {
		return ledger.JobState{}, err
	}
	if err := checkName("Trigger", p.Trigger); err != nil {
		return ledger.JobState{}, err
	}
	if err := s.open(); err != nil {
		return ledger.JobState{}, err
	}
	jp, sk := s.jobPrefix(p.Job), s.specKey(p.Job)
	// Every Txn ends with these two reads.
	reads := []clientv3.Op{clientv3.OpGet(jp, clientv3.WithPrefix()), clientv3.OpGet(sk)}
	then := func(ops ...clientv3.Op) []clientv3.Op { return append(ops, reads...) }
	var (
		resp *clientv3.TxnResponse
		err  error
	)
	switch p.Op {
	case ledger.JobPause:
		resp, err = s.c.Txn(ctx).Then(then(clientv3.OpPut(jp+"p", ""))...).Commit()
	case ledger.JobResume:
		resp, err = s.c.Txn(ctx).Then(then(clientv3.OpDelete(jp + "p"))...).Commit()
	case ledger.JobTrigger, ledger.JobCancel:
		tk := jp + "t" + p.Trigger
		resp, err = s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(tk), "=", 0)).
			Then(then(clientv3.OpPut(tk, triggerValue(time.Now(), p.Request())))...).
			Else(reads...).Commit()
	case ledger.JobTriggerDone:
		resp, err = s.c.Txn(ctx).Then(then(clientv3.OpDelete(jp + "t" + p.Trigger))...).Commit()
	case ledger.JobRegister:
		resp, err = s.register(ctx, p, sk, reads)
	case ledger.JobForget:
		resp, err = s.c.Txn(ctx).Then(then(clientv3.OpDelete(jp, clientv3.WithPrefix()), clientv3.OpDelete(sk))...).Commit()
	}
	if err != nil {
		return ledger.JobState{}, fmt.Errorf("etcdstore: set job state %q: %w", p.Job, err)
	}
	n := len(resp.Responses)
	sts, err := s.jobStates(resp.Responses[n-2].GetResponseRange().GetKvs())
	if err != nil {
		return ledger.JobState{}, err
	}
	if (p.Op == ledger.JobTrigger || p.Op == ledger.JobCancel) && resp.Succeeded {
		s.mark(ctx, 0)
	}
	st := ledger.JobState{Job: p.Job}
	if len(sts) > 0 {
		st = sts[0]
	}
	if kvs := resp.Responses[n-1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if err := parseSpec(&st, kvs[0]); err != nil {
			return ledger.JobState{}, err
		}
	}
	return st, nil
}

// register makes p's registration at sk, and returns the response of a
// Txn that ends with reads.
func (s *Store) register(ctx context.Context, p ledger.JobStateParams, sk string, reads []clientv3.Op) (*clientv3.TxnResponse, error) {
	v := tickText(p.Since) + p.Spec
	resp, err := s.c.Txn(ctx).Then(reads...).Commit()
	for err == nil {
		kvs := resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs()
		var rev int64
		if len(kvs) > 0 {
			if len(kvs[0].Value) >= 24 && string(kvs[0].Value[24:]) == p.Spec {
				return resp, nil
			}
			rev = kvs[0].ModRevision
		}
		resp, err = s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(sk), "=", rev)).
			Then(append([]clientv3.Op{clientv3.OpPut(sk, v)}, reads...)...).
			Else(reads...).Commit()
		if err == nil && resp.Succeeded {
			return resp, nil
		}
	}
	return nil, err
}

// JobStates implements ledger.Ledger: one range read of the job state
// keys (not the registrations).
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: job states: %w", err)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	resp, err := s.c.Get(ctx, s.ledgerKey(jobsDir), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: job states: %w", err)
	}
	return s.jobStates(resp.Kvs)
}

// Jobs implements ledger.Ledger: one Txn of two range reads, the job state
// keys and the registrations.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: jobs: %w", err)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	specs := s.ledgerKey(specsDir)
	resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(s.ledgerKey(jobsDir), clientv3.WithPrefix()),
		clientv3.OpGet(specs, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: jobs: %w", err)
	}
	out, err := s.jobStates(resp.Responses[0].GetResponseRange().GetKvs())
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(out))
	for i := range out {
		index[out[i].Job] = i
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		job := dec(string(kv.Key[len(specs):]))
		i, ok := index[job]
		if !ok {
			i = len(out)
			index[job] = i
			out = append(out, ledger.JobState{Job: job})
		}
		if err := parseSpec(&out[i], kv); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// jobStates reads job state keys (in key order, so grouped by job).
func (s *Store) jobStates(kvs []*mvccpb.KeyValue) ([]ledger.JobState, error) {
	dir := s.ledgerKey(jobsDir)
	var out []ledger.JobState
	var revs []int64 // create revisions of the current state's triggers
	flush := func() {
		if n := len(out); n > 0 {
			st := &out[n-1]
			idx := make([]int, len(st.Triggers))
			for i := range idx {
				idx[i] = i
			}
			slices.SortStableFunc(idx, func(a, b int) int { return int(revs[a] - revs[b]) })
			ts := make([]ledger.TriggerRequest, len(idx))
			for i, j := range idx {
				ts[i] = st.Triggers[j]
			}
			st.Triggers = ts
		}
		revs = revs[:0]
	}
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), dir)
		ej, what, ok2 := strings.Cut(rest, "\x00")
		if !ok || !ok2 || what == "" {
			continue
		}
		job := dec(ej)
		if len(out) == 0 || out[len(out)-1].Job != job {
			flush()
			out = append(out, ledger.JobState{Job: job})
		}
		st := &out[len(out)-1]
		switch what[0] {
		case 'p':
			st.Paused = true
		case 't':
			tr, err := parseTrigger(string(kv.Value))
			if err != nil {
				return nil, fmt.Errorf("etcdstore: job states: bad trigger request at %q: %w", kv.Key, err)
			}
			tr.ID = what[1:]
			st.Triggers = append(st.Triggers, tr)
			revs = append(revs, kv.CreateRevision)
		}
	}
	flush()
	return out, nil
}

// Prune implements ledger.Ledger. Expired claims are already gone (etcd
// deleted them with their leases), so Claims is always 0. Ages are judged
// by etcd's clock through age marks: a record (a trigger request) is
// deleted by age when it was written at or before the revision of a mark
// whose lease is older than the age asked for, by etcd. Costs: a range
// read of the marks and a LeaseTimeToLive per probe of a binary search
// over them (about log2 of their number, per age asked); a keys-only range
// read of every run record (with RunsOlderThan or KeepPerJob) and of every
// job state key (with TriggersOlderThan); one Txn of guarded deletes per
// Txn size of keys to delete (a record's running marker, if any, goes in
// the same guarded delete); one LeaseRevoke per mark it thins out.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	var res ledger.PruneResult
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("etcdstore: prune: %w", err)
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return res, errors.New("etcdstore: prune: negative parameter")
	}
	if err := s.open(); err != nil {
		return res, err
	}
	var ms *marks
	if p.RunsOlderThan > 0 || p.TriggersOlderThan > 0 {
		var err error
		if ms, err = s.readMarks(ctx); err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	runsCut, trigCut := -1, -1
	if p.RunsOlderThan > 0 {
		var err error
		if runsCut, err = ms.cutoff(ctx, s, p.RunsOlderThan); err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	if p.TriggersOlderThan > 0 {
		var err error
		if trigCut, err = ms.cutoff(ctx, s, p.TriggersOlderThan); err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	if p.KeepPerJob > 0 || runsCut >= 0 {
		var rev int64
		if runsCut >= 0 {
			rev = ms.revs[runsCut]
		}
		n, err := s.pruneRuns(ctx, p.KeepPerJob, rev)
		res.Runs = n
		if err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	if trigCut >= 0 {
		n, err := s.pruneTriggers(ctx, ms.revs[trigCut])
		res.Triggers = n
		if err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	if ms != nil {
		// Marks older than the cutoffs found are needed no more, unless an
		// age asked for found none (its marks may yet grow old enough).
		var cuts []int
		if p.RunsOlderThan > 0 {
			cuts = append(cuts, runsCut)
		}
		if p.TriggersOlderThan > 0 {
			cuts = append(cuts, trigCut)
		}
		oldest := 0
		if !slices.Contains(cuts, -1) {
			oldest = slices.Min(cuts)
		}
		if err := ms.thin(ctx, s, oldest, runsCut, trigCut); err != nil {
			return res, fmt.Errorf("etcdstore: prune: %w", err)
		}
	}
	return res, nil
}

// marks are the age marks of a prefix, oldest first.
type marks struct {
	revs   []int64            // the revision each was granted at
	leases []clientv3.LeaseID // its lease
	hints  []time.Time        // the granting Store's wall clock then
	ages   map[int]int64      // probed: the lease's age at least, in s; -1 gone
}

func (s *Store) readMarks(ctx context.Context) (*marks, error) {
	dir := s.ledgerKey(marksDir)
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read age marks: %w", err)
	}
	ms := &marks{ages: map[int]int64{}}
	for _, kv := range resp.Kvs {
		rev, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), dir), 16, 64)
		ms2, err2 := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil || err2 != nil || kv.Lease == 0 {
			continue
		}
		ms.revs = append(ms.revs, rev)
		ms.leases = append(ms.leases, clientv3.LeaseID(kv.Lease))
		ms.hints = append(ms.hints, time.UnixMilli(ms2))
	}
	return ms, nil
}

// age returns how old mark i's lease is at least, by etcd's clock, in
// whole seconds: its granted TTL less its remaining TTL (which etcd
// truncates to seconds) less one; -1 when the lease is gone.
func (ms *marks) age(ctx context.Context, s *Store, i int) (int64, error) {
	if a, ok := ms.ages[i]; ok {
		return a, nil
	}
	r, err := s.c.TimeToLive(ctx, ms.leases[i])
	if err != nil && !isLeaseGone(err) {
		return 0, fmt.Errorf("read an age mark's lease: %w", err)
	}
	a := int64(-1)
	if err == nil && r.TTL >= 0 {
		a = max(r.GrantedTTL-r.TTL-1, 0)
	}
	ms.ages[i] = a
	return a, nil
}

// cutoff returns the newest mark whose lease is at least d old, or -1.
// Marks are granted with one TTL, so their ages fall with their revisions
// (a leader change gives every lease its full TTL again, which keeps the
// order); a binary search finds it, and its age is checked whatever the
// order.
func (ms *marks) cutoff(ctx context.Context, s *Store, d time.Duration) (int, error) {
	lo, hi := 0, len(ms.revs) // the answer is in [lo-1, hi-1]
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		a, err := ms.age(ctx, s, mid)
		if err != nil {
			return -1, err
		}
		if time.Duration(a)*time.Second >= d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return -1, nil
	}
	a, err := ms.age(ctx, s, lo-1)
	if err != nil || time.Duration(a)*time.Second < d {
		return -1, err
	}
	return lo - 1, nil
}

// thin revokes the marks older than oldest and, of the others, those less
// than a markDensity-th of their age (by the hints) from the newer mark
// kept before them, so that the marks kept are few and their spacing
// follows their age. The marks in keep are kept.
func (ms *marks) thin(ctx context.Context, s *Store, oldest int, keep ...int) error {
	var drop []clientv3.LeaseID
	now := time.Now()
	last := -1
	for i := len(ms.revs) - 1; i >= 0; i-- {
		switch {
		case slices.Contains(keep, i) || last < 0:
		case i < oldest:
			drop = append(drop, ms.leases[i])
			continue
		case ms.hints[last].Sub(ms.hints[i]) < max(markEvery, now.Sub(ms.hints[i])/markDensity):
			drop = append(drop, ms.leases[i])
			continue
		}
		last = i
	}
	if len(drop) > maxRevokes {
		drop = drop[len(drop)-maxRevokes:] // the oldest first
	}
	var wg sync.WaitGroup
	errs := make([]error, len(drop))
	sem := make(chan struct{}, 8)
	for j, id := range drop {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := s.c.Revoke(ctx, id); err != nil && !isLeaseGone(err) {
				errs[j] = fmt.Errorf("revoke an age mark's lease: %w", err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pruneRuns deletes the run records past the keep newest of each job
// (keep > 0) and those written at or before revision rev (rev > 0).
func (s *Store) pruneRuns(ctx context.Context, keep int, rev int64) (int, error) {
	dir, udir := s.ledgerKey(runsDir), s.ledgerKey(runningDir)
	resp, err := s.c.Txn(ctx).Then(clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(udir, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return 0, fmt.Errorf("read run records: %w", err)
	}
	markers := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		markers[string(kv.Key)] = true
	}
	var del []*mvccpb.KeyValue
	job, n := "", 0
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		rest := strings.TrimPrefix(string(kv.Key), dir)
		j, _, _ := strings.Cut(rest, "\x00")
		if j != job {
			job, n = j, 0
		}
		n++
		if (keep > 0 && n > keep) || (rev > 0 && kv.ModRevision <= rev) {
			del = append(del, kv)
		}
	}
	// A record's marker goes with it: it exists exactly while the record
	// is running, which the guard checks.
	return s.deleteGuarded(ctx, del, false, func(k string) string {
		if m := s.markerKey(k); markers[m] {
			return m
		}
		return ""
	})
}

// pruneTriggers deletes the trigger requests made at or before revision
// rev.
func (s *Store) pruneTriggers(ctx context.Context, rev int64) (int, error) {
	dir := s.ledgerKey(jobsDir)
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("read job states: %w", err)
	}
	var del []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		_, what, _ := strings.Cut(string(kv.Key[len(dir):]), "\x00")
		if strings.HasPrefix(what, "t") && kv.CreateRevision <= rev {
			del = append(del, kv)
		}
	}
	return s.deleteGuarded(ctx, del, true, nil)
}

// deleteGuarded deletes kvs, each only if it was not written again since
// it was read (by its create revision when created is set, else by its mod
// revision), in Txns of nested Txns, and counts what it deleted. also,
// when not nil, names a key to delete with each (or ""), uncounted.
func (s *Store) deleteGuarded(ctx context.Context, kvs []*mvccpb.KeyValue, created bool, also func(string) string) (int, error) {
	deleted := 0
	nested := 1 // operations of a nested Txn
	if also != nil {
		nested = 2
	}
	for lo := 0; lo < len(kvs); {
		n := min(len(kvs)-lo, max(int(s.txnOps.Load())-nested, 1))
		ops := make([]clientv3.Op, n)
		for j, kv := range kvs[lo : lo+n] {
			k := string(kv.Key)
			cmp := clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision)
			if created {
				cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision)
			}
			then := []clientv3.Op{clientv3.OpDelete(k)}
			if also != nil {
				if a := also(k); a != "" {
					then = append(then, clientv3.OpDelete(a))
				}
			}
			ops[j] = clientv3.OpTxn([]clientv3.Cmp{cmp}, then, nil)
		}
		resp, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n+nested) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("delete %d keys: %w", n, err)
		}
		for _, r := range resp.Responses {
			if t := r.GetResponseTxn(); t != nil && t.Succeeded && len(t.Responses) > 0 {
				deleted += int(t.Responses[0].GetResponseDeleteRange().GetDeleted())
			}
		}
		lo += n
	}
	return deleted, nil
}
