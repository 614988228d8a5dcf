package apijson

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// NotifyAction is the Action of the audit entries that log notification
// deliveries: tasklock serve appends one per attempt to deliver a
// notification to one target, its Detail a Delivery as JSON.
const NotifyAction = "notify"

// Delivery is one attempt to deliver a notification to one target, as
// GET /api/notifications lists it. Seq, At, Node and Job come from the
// audit entry that keeps it; the rest from its Detail.
type Delivery struct {
	Seq  int64     `json:"seq"`
	At   time.Time `json:"at"`   // when it was logged, by the store's clock
	Node string    `json:"node"` // the node that sent it
	Job  string    `json:"job"`
	// ID identifies the notification: the same for every attempt and
	// target of one (the webhook's X-Tasklock-Delivery header).
	ID      string    `json:"id"`
	Event   string    `json:"event"` // failure, timeout, lost, missed, interrupted, recovery
	Tick    time.Time `json:"tick"`
	Trigger string    `json:"trigger,omitempty"`
	Shard   int       `json:"shard"`
	Status  string    `json:"status"` // the run's status
	// Target is "webhook " and the URL (secrets in it hidden), or
	// "command " and the program.
	Target  string `json:"target"`
	Attempt int    `json:"attempt"` // 1 for the first
	// Code is the webhook's HTTP status, or the command's exit status; 0
	// when there was none (a transport error, a command not started).
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Result is delivered, retrying (NextRetry says when) or failed (no
	// more attempts).
	Result    string     `json:"result"`
	NextRetry *time.Time `json:"next_retry,omitempty"`
}

// DeliveryDetail is the audit Detail of d.
func DeliveryDetail(d Delivery) string {
	d.Seq, d.At, d.Node, d.Job = 0, time.Time{}, "", ""
	b, _ := json.Marshal(d) // plain data: cannot fail
	return string(b)
}

// FromDelivery reads a delivery from its audit entry; false when e is not
// one.
func FromDelivery(e ledger.AuditEntry) (Delivery, bool) {
	var d Delivery
	if e.Action != NotifyAction || json.Unmarshal([]byte(e.Detail), &d) != nil {
		return Delivery{}, false
	}
	d.Seq, d.At, d.Job = e.Seq, e.At.UTC(), e.Job
	d.Node = strings.TrimPrefix(e.Who, NotifyWhoPrefix)
	return d, true
}

// NotifyWhoPrefix starts the Who of a delivery's audit entry, before the
// sending node's name.
const NotifyWhoPrefix = "serve:"

// ReadDeliveries reads the delivery log of job ("" for every job) from
// the audit list, newest first: at most limit deliveries older than
// before (a Seq; 0 for the newest), looking through at most pages reads
// of the audit list (other entries are passed over). next is the Seq to
// pass as before to go on, 0 at the end.
func ReadDeliveries(ctx context.Context, cat ledger.Catalog, job string, before int64, limit, pages int) (out []Delivery, next int64, err error) {
	q := ledger.AuditQuery{Job: job, Before: before, Limit: max(limit, 100)}
	out = []Delivery{}
	for page := 1; ; page++ {
		es, err := cat.Audit(ctx, q)
		if err != nil {
			return nil, 0, err
		}
		for _, e := range es {
			d, ok := FromDelivery(e)
			if !ok {
				continue
			}
			if len(out) == limit {
				return out, out[limit-1].Seq, nil
			}
			out = append(out, d)
		}
		if len(es) < q.Limit {
			return out, 0, nil // the end of the list
		}
		q.Before = es[len(es)-1].Seq
		if page >= pages {
			return out, q.Before, nil // go on from here
		}
	}
}
