package apijson

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// Audit is one audit entry, as `tasklock jobs audit --json` and GET
// /api/audit show it.
type Audit struct {
	Seq    int64     `json:"seq"`
	At     time.Time `json:"at"`
	Who    string    `json:"who"`
	Job    string    `json:"job,omitempty"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
}

// FromAudit converts an audit entry.
func FromAudit(e ledger.AuditEntry) Audit {
	return Audit{Seq: e.Seq, At: e.At.UTC(), Who: e.Who, Job: e.Job, Action: e.Action, Detail: e.Detail}
}

// The Detail of the audit entry of a job deleted at run time starts with
// one of these: every node of tasklock serve reads it to know whether the
// job's runs in progress finish or are cancelled.
const (
	DeleteFinish = "runs in progress finish"
	DeleteCancel = "runs in progress are cancelled"
)

// DeleteDetail is the Detail of a delete's audit entry.
func DeleteDetail(cancel bool) string {
	if cancel {
		return DeleteCancel
	}
	return DeleteFinish
}

// DeleteCancels reports whether the audit entry e is of a delete that
// cancels the job's runs in progress.
func DeleteCancels(e ledger.AuditEntry) bool {
	return e.Action == "delete" && strings.HasPrefix(e.Detail, DeleteCancel)
}

// DefDiff describes for the audit what changed from the job definition old
// to new (JSON objects of the keys of a configuration file's job; "" for
// none): one "key: old -> new" a line, in key order. The value of http
// is not shown, only that it changed: its headers may hold credentials.
func DefDiff(old, new string) string {
	var a, b map[string]json.RawMessage
	if old != "" {
		_ = json.Unmarshal([]byte(old), &a)
	}
	if new != "" {
		_ = json.Unmarshal([]byte(new), &b)
	}
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var lines []string
	show := func(k string, v json.RawMessage) string {
		switch {
		case v == nil:
			return "(unset)"
		case k == "http":
			return "(set)"
		}
		return string(v)
	}
	for _, k := range keys {
		va, vb := a[k], b[k]
		if bytes.Equal(va, vb) {
			continue
		}
		if k == "http" && va != nil && vb != nil {
			lines = append(lines, "http: changed")
			continue
		}
		lines = append(lines, k+": "+show(k, va)+" -> "+show(k, vb))
	}
	return ClipDetail(strings.Join(lines, "\n"))
}

// ClipDetail cuts s to fit ledger.MaxAuditDetail, at a rune boundary.
func ClipDetail(s string) string {
	if len(s) <= ledger.MaxAuditDetail {
		return s
	}
	return strings.ToValidUTF8(s[:ledger.MaxAuditDetail-3], "") + "..."
}

// MaxNote bounds the note of a trigger (POST /api/jobs/{name}/trigger,
// tasklock jobs trigger --note), in bytes.
const MaxNote = 1000

// TriggerDetail is the Detail of a trigger's audit entry: its request ID
// and the note given with it, if any.
func TriggerDetail(id, note string) string {
	if note == "" {
		return "trigger " + id
	}
	return "trigger " + id + ", note: " + note
}

// RunDetail names a run in the Detail of a cancel's or retry's audit
// entry: its tick, trigger and shard (when set), and attempt.
func RunDetail(k ledger.RunKey, attempt int) string {
	s := "tick " + k.Tick.UTC().Format(time.RFC3339Nano)
	if k.Trigger != "" {
		s += " trigger " + k.Trigger
	}
	if k.Shard != 0 {
		s += " shard " + strconv.Itoa(k.Shard)
	}
	return s + " attempt " + strconv.Itoa(attempt)
}
