package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// Sub-prefixes of the catalog (after Prefix + ledgerMark + "ledger/"),
// beside the ledger's; see the package documentation.
const (
	defsDir     = "d/" // d/<job>: a definition (defValue, JSON)
	versionsDir = "v/" // v/<job>: the job's last version (decimal), kept across deletes
	auditDir    = "a/" // a/<seq>: an audit entry (auditValue, JSON)
	auditJobDir = "b/" // b/<job>\x00<seq>: a copy of each entry of a job
	// auditSeqKey holds the last audit Seq (decimal). Every append bumps it
	// in the Txn that writes the entry, guarded by its mod revision.
	auditSeqKey = "n/audit"
)

// catalogRounds bounds the attempts at one change while other writers keep
// winning the race for the audit sequence or the definition.
const catalogRounds = 64

// defValue is a definition as stored.
type defValue struct {
	Def     string    `json:"d"`
	Version int64     `json:"v"`
	Updated time.Time `json:"u"`
}

// auditValue is an audit entry as stored.
type auditValue struct {
	Seq    int64     `json:"q"`
	At     time.Time `json:"t"`
	Who    string    `json:"w"`
	Job    string    `json:"j,omitempty"`
	Action string    `json:"a"`
	Detail string    `json:"x,omitempty"`
}

func (s *Store) defKey(job string) string     { return s.ledgerKey(defsDir) + enc(job) }
func (s *Store) versionKey(job string) string { return s.ledgerKey(versionsDir) + enc(job) }

// seqText is an audit Seq as 16 hex digits, in order.
func seqText(seq int64) string { return fmt.Sprintf("%016x", uint64(seq)) }

// auditJobPrefix is the prefix of job's copies of audit entries.
func (s *Store) auditJobPrefix(job string) string {
	return s.ledgerKey(auditJobDir) + enc(job) + "\x00"
}

// auditOps returns the puts that append e with sequence seq (and bump the
// counter to it).
func (s *Store) auditOps(e ledger.AuditEntry, seq int64, now time.Time) ([]clientv3.Op, error) {
	v, err := json.Marshal(auditValue{Seq: seq, At: now, Who: e.Who, Job: e.Job, Action: e.Action, Detail: e.Detail})
	if err != nil {
		return nil, err
	}
	ops := []clientv3.Op{
		clientv3.OpPut(s.ledgerKey(auditSeqKey), strconv.FormatInt(seq, 10)),
		clientv3.OpPut(s.ledgerKey(auditDir)+seqText(seq), string(v)),
	}
	if e.Job != "" {
		ops = append(ops, clientv3.OpPut(s.auditJobPrefix(e.Job)+seqText(seq), string(v)))
	}
	return ops, nil
}

// kvOf returns the key read by the i-th range of a Txn response, or nil.
func kvOf(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// modRev is kv's mod revision, 0 for none (as a Compare sees a missing key).
func modRev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// lastSeq reads the audit counter's value.
func lastSeq(kv *mvccpb.KeyValue) (int64, error) {
	if kv == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: bad audit sequence at %q", kv.Key)
	}
	return n, nil
}

func parseDef(job string, kv *mvccpb.KeyValue) (ledger.JobDef, error) {
	var v defValue
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return ledger.JobDef{}, fmt.Errorf("etcdstore: bad job definition at %q: %w", kv.Key, err)
	}
	return ledger.JobDef{Job: job, Def: v.Def, Version: v.Version, Updated: v.Updated}, nil
}

// PutJobDef implements ledger.Catalog: a Txn reads the definition, the
// job's last version and the audit sequence, then a Txn guarded by the mod
// revisions of those three keys writes the definition (or deletes it), the
// version, the audit entry and the sequence, and reads the three again when
// a guard fails (another change came between), to decide again: two round
// trips when no other writer interferes. Versions are kept under
// v/<job> apart from the definition, so that they keep rising across a
// delete and a new create. Updated and the entry's At are the Store's wall
// clock (etcd has none a client can read).
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition: %w", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("etcdstore: %w", err)
	}
	if err := checkName("Job", p.Job); err != nil {
		return ledger.JobDef{}, err
	}
	if err := s.open(); err != nil {
		return ledger.JobDef{}, err
	}
	p.Audit.Job = p.Job
	dk, vk, sk := s.defKey(p.Job), s.versionKey(p.Job), s.ledgerKey(auditSeqKey)
	reads := []clientv3.Op{clientv3.OpGet(dk), clientv3.OpGet(vk), clientv3.OpGet(sk)}
	resp, terr := s.c.Txn(ctx).Then(reads...).Commit()
	for range catalogRounds {
		if terr != nil {
			return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition %q: %w", p.Job, terr)
		}
		n := len(resp.Responses)
		dkv, vkv, skv := kvOf(resp, n-3), kvOf(resp, n-2), kvOf(resp, n-1)
		var cur ledger.JobDef
		if dkv != nil {
			var err error
			if cur, err = parseDef(p.Job, dkv); err != nil {
				return ledger.JobDef{}, err
			}
		}
		last := cur.Version
		if vkv != nil {
			v, perr := strconv.ParseInt(string(vkv.Value), 10, 64)
			if perr != nil {
				return ledger.JobDef{}, fmt.Errorf("etcdstore: bad job version at %q", vkv.Key)
			}
			last = max(last, v)
		}
		seq, err := lastSeq(skv)
		if err != nil {
			return ledger.JobDef{}, err
		}
		switch {
		case p.IfVersion == -1 && dkv != nil, p.IfVersion > 0 && (dkv == nil || cur.Version != p.IfVersion):
			return ledger.JobDef{}, fmt.Errorf("etcdstore: job %q: %w", p.Job, ledger.ErrVersion)
		case p.Delete && dkv == nil:
			return ledger.JobDef{}, fmt.Errorf("etcdstore: job %q: %w", p.Job, ledger.ErrNoJobDef)
		}
		now := time.Now().UTC().Round(0)
		var d ledger.JobDef
		var ops []clientv3.Op
		if p.Delete {
			d = cur
			d.Deleted = true
			ops = append(ops, clientv3.OpDelete(dk))
		} else {
			d = ledger.JobDef{Job: p.Job, Def: p.Def, Version: last + 1, Updated: now}
			v, err := json.Marshal(defValue{Def: d.Def, Version: d.Version, Updated: now})
			if err != nil {
				return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition %q: %w", p.Job, err)
			}
			ops = append(ops, clientv3.OpPut(dk, string(v)), clientv3.OpPut(vk, strconv.FormatInt(d.Version, 10)))
		}
		aops, err := s.auditOps(p.Audit, seq+1, now)
		if err != nil {
			return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition %q: %w", p.Job, err)
		}
		resp, terr = s.c.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(dk), "=", modRev(dkv)),
			clientv3.Compare(clientv3.ModRevision(vk), "=", modRev(vkv)),
			clientv3.Compare(clientv3.ModRevision(sk), "=", modRev(skv)),
		).Then(append(ops, aops...)...).Else(reads...).Commit()
		if terr == nil && resp.Succeeded {
			return d, nil
		}
	}
	if terr != nil {
		return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition %q: %w", p.Job, terr)
	}
	return ledger.JobDef{}, fmt.Errorf("etcdstore: put job definition %q: the catalog kept changing (%d tries)", p.Job, catalogRounds)
}

// JobDefs implements ledger.Catalog: one range read of the definitions.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: job definitions: %w", err)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	dir := s.ledgerKey(defsDir)
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdstore: job definitions: %w", err)
	}
	out := make([]ledger.JobDef, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		d, err := parseDef(dec(string(kv.Key[len(dir):])), kv)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog: a read of the audit sequence, then
// a Txn guarded by its mod revision that bumps it and writes the entry (and
// reads it again when another append came between). At is the Store's wall
// clock.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdstore: append audit: %w", err)
	}
	if err := e.Check(); err != nil {
		return fmt.Errorf("etcdstore: %w", err)
	}
	if err := checkName("Job", e.Job); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	sk := s.ledgerKey(auditSeqKey)
	resp, terr := s.c.Txn(ctx).Then(clientv3.OpGet(sk)).Commit()
	for range catalogRounds {
		if terr != nil {
			return fmt.Errorf("etcdstore: append audit: %w", terr)
		}
		skv := kvOf(resp, 0)
		seq, err := lastSeq(skv)
		if err != nil {
			return err
		}
		ops, err := s.auditOps(e, seq+1, time.Now().UTC().Round(0))
		if err != nil {
			return fmt.Errorf("etcdstore: append audit: %w", err)
		}
		resp, terr = s.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(sk), "=", modRev(skv))).
			Then(ops...).Else(clientv3.OpGet(sk)).Commit()
		if terr == nil && resp.Succeeded {
			return nil
		}
	}
	if terr != nil {
		return fmt.Errorf("etcdstore: append audit: %w", terr)
	}
	return fmt.Errorf("etcdstore: append audit: the sequence kept changing (%d tries)", catalogRounds)
}

// Audit implements ledger.Catalog: one range read, newest first, of every
// entry (a/) or of the job's copies (b/<job>), below Before, at most Limit.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdstore: audit: %w", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("etcdstore: audit: negative Limit %d", q.Limit)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	dir := s.ledgerKey(auditDir)
	if q.Job != "" {
		dir = s.auditJobPrefix(q.Job)
	}
	end := clientv3.GetPrefixRangeEnd(dir)
	if q.Before > 0 {
		end = dir + seqText(q.Before)
	}
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if q.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(q.Limit)))
	}
	resp, err := s.c.Get(ctx, dir, opts...)
	if err != nil {
		return nil, fmt.Errorf("etcdstore: audit: %w", err)
	}
	out := make([]ledger.AuditEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var v auditValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("etcdstore: audit: bad entry at %q: %w", kv.Key, err)
		}
		out = append(out, ledger.AuditEntry{Seq: v.Seq, At: v.At, Who: v.Who, Job: v.Job, Action: v.Action, Detail: v.Detail})
	}
	return out, nil
}
