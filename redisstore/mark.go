package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

//go:embed ledger_mark.lua
var ledgerMarkSrc string

var markScript = newLuaScript(ledgerMarkSrc)

var _ ledger.Marker = (*Store)(nil)

// marksKey is the hash of the nodes' claim marks: Prefix+"ledger:marks".
func (s *Store) marksKey() string { return s.prefix + "ledger:marks" }

// Mark implements ledger.Marker with one script call (ledger_mark.lua),
// which keeps the marks in one hash, each with its expiry by Redis's clock.
func (s *Store) Mark(ctx context.Context, m ledger.ClaimMark, ttl time.Duration) ([]ledger.ClaimMark, error) {
	if err := ctx.Err(); err != nil {
		return nil, ledgerErr("mark", err)
	}
	if err := m.Check(ttl); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	v := markTime(m.From) + ":" + markTime(m.Through) + ":" + m.View
	args := []any{"evalsha", markScript.sha, 1, s.marksKey(), m.Node, v, millis(ttl)}
	res, err := markScript.run(ctx, s.client, args).StringSlice()
	if err != nil {
		return nil, ledgerErr("mark", err)
	}
	out := make([]ledger.ClaimMark, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		cm, err := decodeMark(res[i], res[i+1])
		if err != nil {
			return nil, ledgerErr("mark", err)
		}
		out = append(out, cm)
	}
	return out, nil
}

// markTime encodes t as unix nanoseconds, the zero time as "".
func markTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

// parseMarkTime decodes markTime.
func parseMarkTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	return time.Unix(0, ns).UTC(), err
}

// decodeMark reads node's mark, from:through:view (markTime).
func decodeMark(node, v string) (ledger.ClaimMark, error) {
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return ledger.ClaimMark{}, fmt.Errorf("node %q: malformed mark %q", node, v)
	}
	from, err1 := parseMarkTime(parts[0])
	through, err2 := parseMarkTime(parts[1])
	if err1 != nil || err2 != nil {
		return ledger.ClaimMark{}, fmt.Errorf("node %q: malformed mark %q", node, v)
	}
	return ledger.ClaimMark{Node: node, View: parts[2], From: from, Through: through}, nil
}
