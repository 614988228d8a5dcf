package zkstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// The catalog's nodes, under Root/%ledger; see the package documentation.
func (s *Store) defsDir() string     { return s.ledgerDir() + "/defs" }
func (s *Store) versionsDir() string { return s.ledgerDir() + "/versions" }
func (s *Store) auditDir() string    { return s.ledgerDir() + "/audit" }

// Limits of the catalog.
const (
	// maxAuditJobName bounds the job's name in an audit node's name: a
	// longer one is replaced by a hash (auditJobName).
	maxAuditJobName = 64
	// seqDigits is the width of the counter ZooKeeper appends to the name
	// of a sequential node.
	seqDigits = 10
)

// defData is what a definition's node holds, as JSON. Updated is the
// node's mtime.
type defData struct {
	Def     string `json:"def"`
	Version int64  `json:"version"`
}

// auditData is what an audit entry's node holds, as JSON. Seq is the
// sequence number in its name, At its ctime.
type auditData struct {
	Who    string `json:"who"`
	Job    string `json:"job,omitempty"`
	Action string `json:"action"`
	Detail string `json:"detail,omitempty"`
}

// auditJobName is the part of an audit node's name that tells its job:
// the escaped name, or when that is longer than maxAuditJobName "#" and a
// hash of the name. Audit reads the job from the data too, so a hash (or a
// job whose escaped name looks like one) never selects another job's
// entry.
func auditJobName(job string) string {
	if e := escapeName(job); len(e) <= maxAuditJobName {
		return e
	}
	h := sha256.Sum256([]byte(job))
	return "#" + hex.EncodeToString(h[:16])
}

// auditPrefix is the path an audit entry's sequential node is created
// with: ZooKeeper appends the sequence number.
func (s *Store) auditPrefix(job string) string {
	return s.auditDir() + "/a-" + auditJobName(job) + shardMark
}

// parseAuditName returns the job part and the Seq of an audit node's name.
func parseAuditName(name string) (string, int64, bool) {
	n := len(name)
	if n < 2+len(shardMark)+seqDigits || !strings.HasPrefix(name, "a-") || name[n-seqDigits-len(shardMark):n-seqDigits] != shardMark {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(name[n-seqDigits:], 10, 64)
	if err != nil || seq < 0 {
		return "", 0, false
	}
	return name[2 : n-seqDigits-len(shardMark)], seq, true
}

// auditCreate is the create of the audit node of e.
func (s *Store) auditCreate(e ledger.AuditEntry) (*zk.CreateRequest, error) {
	b, err := json.Marshal(auditData{Who: e.Who, Job: e.Job, Action: e.Action, Detail: e.Detail})
	if err != nil {
		return nil, err
	}
	return &zk.CreateRequest{Path: s.auditPrefix(e.Job), Data: b, Acl: s.acl, Flags: zk.FlagSequence}, nil
}

// PutJobDef implements ledger.Catalog: it reads the definition's node
// (defs/<job>) and the job's version node (versions/<job>, which outlives
// the definition so that versions keep rising across a delete and a new
// create), pipelined, then makes the change in one multi that creates,
// sets or deletes the definition (version-checked against the read, or a
// create that fails when one appeared meanwhile), sets the version node
// (version-checked, or created) and creates the audit entry's sequential
// node: two round trips when no other writer comes between (a writer that
// loses reads again and decides again). A created definition is set again
// in the same multi, so that the multi's answer carries its mtime, which
// is Updated: the server's clock, as is the audit entry's At (its ctime).
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("zkstore: put job definition: %w", err)
	}
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("zkstore: %w", err)
	}
	if err := checkLedgerName("Job", p.Job); err != nil {
		return ledger.JobDef{}, err
	}
	p.Audit.Job = p.Job
	d, err := call(ctx, func() (ledger.JobDef, error) { return s.putJobDef(&p) }, nil)
	if err != nil {
		return ledger.JobDef{}, fmt.Errorf("zkstore: put job definition %q: %w", p.Job, err)
	}
	return d, nil
}

func (s *Store) putJobDef(p *ledger.JobDefParams) (ledger.JobDef, error) {
	job := escapeName(p.Job)
	dpath, vpath := s.defsDir()+"/"+job, s.versionsDir()+"/"+job
	audit, err := s.auditCreate(p.Audit)
	if err != nil {
		return ledger.JobDef{}, err
	}
	for range stateRounds {
		read := s.readRaw(s.ledgerDir(), []string{"defs/" + job, "versions/" + job})
		dn, vn := read[0], read[1]
		for i, rn := range read {
			if rn.err != nil && !errors.Is(rn.err, zk.ErrNoNode) {
				return ledger.JobDef{}, fmt.Errorf("read %s: %w", []string{dpath, vpath}[i], rn.err)
			}
		}
		exists := dn.err == nil
		var cur ledger.JobDef
		if exists {
			if cur, err = parseDef(p.Job, dpath, dn); err != nil {
				return ledger.JobDef{}, err
			}
		}
		last := cur.Version
		if vn.err == nil {
			v, perr := strconv.ParseInt(string(vn.data), 10, 64)
			if perr != nil {
				return ledger.JobDef{}, fmt.Errorf("bad job version at %s", vpath)
			}
			last = max(last, v)
		}
		switch {
		case p.IfVersion == -1 && exists, p.IfVersion > 0 && (!exists || cur.Version != p.IfVersion):
			return ledger.JobDef{}, ledger.ErrVersion
		case p.Delete && !exists:
			return ledger.JobDef{}, ledger.ErrNoJobDef
		}
		var ops []any
		var d ledger.JobDef
		if p.Delete {
			d = cur
			d.Deleted = true
			ops = append(ops, &zk.DeleteRequest{Path: dpath, Version: dn.stat.Version})
		} else {
			d = ledger.JobDef{Job: p.Job, Def: p.Def, Version: last + 1}
			b, err := json.Marshal(defData{Def: p.Def, Version: d.Version})
			if err != nil {
				return ledger.JobDef{}, err
			}
			if exists {
				ops = append(ops, &zk.SetDataRequest{Path: dpath, Data: b, Version: dn.stat.Version})
			} else {
				ops = append(ops, &zk.CreateRequest{Path: dpath, Data: b, Acl: s.acl, Flags: zk.FlagPersistent},
					&zk.SetDataRequest{Path: dpath, Data: b, Version: 0})
			}
			v := []byte(strconv.FormatInt(d.Version, 10))
			if vn.err == nil {
				ops = append(ops, &zk.SetDataRequest{Path: vpath, Data: v, Version: vn.stat.Version})
			} else {
				ops = append(ops, &zk.CreateRequest{Path: vpath, Data: v, Acl: s.acl, Flags: zk.FlagPersistent})
			}
		}
		ops = append(ops, audit)
		resp, err := s.conn.Multi(ops...)
		if err == nil {
			if !p.Delete {
				st := resp[len(resp)-3].Stat // the definition's last SetData
				if st == nil {
					return ledger.JobDef{}, fmt.Errorf("write %s: no stat in the answer", dpath)
				}
				d.Updated = time.UnixMilli(st.Mtime).UTC()
			}
			return d, nil
		}
		at := failedOp(resp)
		if at < 0 || at >= len(ops) {
			return ledger.JobDef{}, fmt.Errorf("write %s: %w", dpath, err)
		}
		switch op := ops[at].(type) {
		case *zk.CreateRequest:
			if errors.Is(err, zk.ErrNodeExists) {
				continue // created meanwhile: decide again
			}
			if !errors.Is(err, zk.ErrNoNode) {
				return ledger.JobDef{}, fmt.Errorf("create %s: %w", op.Path, err)
			}
			// Its parent is missing.
			if err := s.ensureNode(op.Path[:strings.LastIndexByte(op.Path, '/')], false); err != nil {
				return ledger.JobDef{}, err
			}
		default:
			if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
				continue // changed or deleted meanwhile: decide again
			}
			return ledger.JobDef{}, fmt.Errorf("write %s: %w", dpath, err)
		}
	}
	return ledger.JobDef{}, fmt.Errorf("write %s: it kept changing", dpath)
}

// parseDef reads a definition's node.
func parseDef(job, path string, rn rawNode) (ledger.JobDef, error) {
	var d defData
	if err := json.Unmarshal(rn.data, &d); err != nil {
		return ledger.JobDef{}, fmt.Errorf("bad job definition at %s: %w", path, err)
	}
	return ledger.JobDef{Job: job, Def: d.Def, Version: d.Version, Updated: time.UnixMilli(rn.stat.Mtime).UTC()}, nil
}

// JobDefs implements ledger.Catalog: a list of Root/%ledger/defs, then a
// read of each definition, pipelined.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: job definitions: %w", err)
	}
	out, err := call(ctx, s.jobDefs, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: job definitions: %w", err)
	}
	return out, nil
}

func (s *Store) jobDefs() ([]ledger.JobDef, error) {
	dir := s.defsDir()
	names, _, err := s.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := make([]ledger.JobDef, 0, len(names))
	for i, rn := range s.readRaw(dir, names) {
		if errors.Is(rn.err, zk.ErrNoNode) {
			continue // deleted meanwhile
		}
		if rn.err != nil {
			return nil, fmt.Errorf("read %s/%s: %w", dir, names[i], rn.err)
		}
		job, ok := unescapeName(names[i])
		if !ok {
			continue
		}
		d, err := parseDef(job, dir+"/"+names[i], rn)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog: one create of a sequential node
// under Root/%ledger/audit (two more, once, when that is missing). At is
// the node's ctime.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zkstore: append audit: %w", err)
	}
	if err := e.Check(); err != nil {
		return fmt.Errorf("zkstore: %w", err)
	}
	if err := checkLedgerName("Job", e.Job); err != nil {
		return err
	}
	req, err := s.auditCreate(e)
	if err != nil {
		return fmt.Errorf("zkstore: append audit: %w", err)
	}
	_, err = call(ctx, func() (struct{}, error) {
		for range 2 {
			_, err := s.conn.Create(req.Path, req.Data, req.Flags, req.Acl)
			if !errors.Is(err, zk.ErrNoNode) {
				return struct{}{}, err
			}
			if err := s.ensureNode(s.auditDir(), false); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, fmt.Errorf("create under %s: %w", s.auditDir(), zk.ErrNoNode)
	}, nil)
	if err != nil {
		return fmt.Errorf("zkstore: append audit: %w", err)
	}
	return nil
}

// Audit implements ledger.Catalog: a list of Root/%ledger/audit, whose
// names tell each entry's Seq and job, then a read of as many entries as
// Limit needs, newest first, pipelined.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zkstore: audit: %w", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("zkstore: audit: negative Limit %d", q.Limit)
	}
	out, err := call(ctx, func() ([]ledger.AuditEntry, error) { return s.audit(q) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: audit: %w", err)
	}
	return out, nil
}

func (s *Store) audit(q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	dir := s.auditDir()
	names, _, err := s.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	type cand struct {
		name string
		seq  int64
	}
	var jn string
	if q.Job != "" {
		jn = auditJobName(q.Job)
	}
	var cands []cand
	for _, name := range names {
		j, seq, ok := parseAuditName(name)
		if ok && (q.Job == "" || j == jn) && (q.Before <= 0 || seq < q.Before) {
			cands = append(cands, cand{name, seq})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.seq, a.seq) })
	var out []ledger.AuditEntry
	for lo := 0; lo < len(cands) && (q.Limit == 0 || len(out) < q.Limit); {
		n := len(cands) - lo
		if q.Limit > 0 {
			n = min(n, q.Limit-len(out))
		}
		win := cands[lo : lo+n]
		read := make([]rawNode, n)
		parallel(n, func(i int) { read[i].data, read[i].stat, read[i].err = s.conn.Get(dir + "/" + win[i].name) })
		for i, rn := range read {
			if errors.Is(rn.err, zk.ErrNoNode) {
				continue // deleted by hand
			}
			if rn.err != nil {
				return nil, fmt.Errorf("read %s/%s: %w", dir, win[i].name, rn.err)
			}
			var a auditData
			if err := json.Unmarshal(rn.data, &a); err != nil {
				return nil, fmt.Errorf("bad audit entry at %s/%s: %w", dir, win[i].name, err)
			}
			if q.Job != "" && a.Job != q.Job {
				continue // another job with the same hash
			}
			out = append(out, ledger.AuditEntry{Seq: win[i].seq, At: time.UnixMilli(rn.stat.Ctime).UTC(),
				Who: a.Who, Job: a.Job, Action: a.Action, Detail: a.Detail})
		}
		lo += n
	}
	return out, nil
}
