package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// Renewal statements are split so that none gets too big for the server's
// max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const (
	renewMaxLeases = 5000
	renewMaxBytes  = 4 << 20
)

// leaseAcquire grants p.Key in one statement:
//
//	INSERT INTO t (...) VALUES (key, token, owner, LAST_INSERT_ID(1), now, now + ttl)
//	ON DUPLICATE KEY UPDATE
//	  fence = IF(expires_at <= now, LAST_INSERT_ID(fence + 1),
//	          IF(token = VALUES(token), LAST_INSERT_ID(fence), fence + 0 * LAST_INSERT_ID(0))),
//	  token = IF(expires_at <= now, VALUES(token), token), ... , expires_at = IF(...)  -- last
//
// The OK packet's insert id is the argument of the statement's last
// LAST_INSERT_ID(expr) call: the fence when the key was granted (a new row,
// an expired lease, or a retry by the same token whose reply was lost), and 0
// when another token holds it. That needs no AUTO_INCREMENT column and does
// not depend on how the DSN counts affected rows (clientFoundRows).
// expires_at is assigned last because MySQL evaluates the assignments of an
// UPDATE from left to right, each seeing the columns assigned before it.
// Only when the key is held does a second statement read the holder's
// owner and remaining TTL. A waiter that polls would pay that twice on
// every try, so after an Acquire that found its key held, the next one on
// MariaDB ends in RETURNING, as a batch's statement does (see
// AcquireBatch): its row answers a refusal too, one statement whether the
// key is granted or held. Not always, because on a grant the result set
// costs more than the OK packet (30 µs more of the server's CPU per
// pair, 15 µs more of the client's, measured on MariaDB 10.11 with one
// goroutine), and a grant on a free key is the common case. VALUES(col)
// is the value of col in the row the statement tried to insert, so that
// the same text serves a batch of rows.
func (s *Store) leaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if s.lastHeld.Load() {
		returning, err := s.returning(ctx)
		if err != nil {
			return driver.Grant{}, s.wrap(fmt.Sprintf("acquire %q", p.Key), err)
		}
		if returning {
			res := make([]driver.AcquireResult, 1)
			if err := s.acquireChunk(ctx, s.db, true, []driver.AcquireParams{p}, []int{0}, res); err != nil {
				return driver.Grant{}, s.wrap(fmt.Sprintf("acquire %q", p.Key), err)
			}
			s.lastHeld.Store(res[0].Err != nil)
			return res[0].Grant, res[0].Err
		}
	}
	q := s.leaseAcquireSQL([]driver.AcquireParams{p}, false)
	for range 2 {
		res, err := s.db.ExecContext(ctx, q)
		if err != nil {
			return driver.Grant{}, s.wrap(fmt.Sprintf("acquire %q", p.Key), err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return driver.Grant{}, s.wrap(fmt.Sprintf("acquire %q", p.Key), err)
		}
		if id != 0 {
			s.lastHeld.Store(false)
			return driver.Grant{Fence: uint64(id)}, nil
		}
		held, live := s.leaseHolder(ctx, p.Key)
		if live {
			s.lastHeld.Store(true)
			return driver.Grant{}, held
		}
		// The lease ended between the two statements: try once more.
	}
	return driver.Grant{}, &driver.HeldError{}
}

// leaseAcquireSQL is leaseAcquire's statement for rows, in their order,
// followed when returning is set by "RETURNING " + leaseCols (MariaDB):
// the row of each, as the statement left it.
func (s *Store) leaseAcquireSQL(rows []driver.AcquireParams, returning bool) string {
	n := 600
	for _, p := range rows {
		n += 120 + 2*len(p.Key) + 2*len(p.Token) + 2*len(p.Owner)
	}
	b := s.appendInsertValues(make([]byte, 0, n), len(rows), func(b []byte, i int) []byte {
		return appendExpiry(appendAcquireRow(b, rows[i]), rows[i].TTL)
	})
	b = append(b, " ON DUPLICATE KEY UPDATE fence = IF("+acquireExpired+", LAST_INSERT_ID(fence + 1), IF(token = VALUES(token), LAST_INSERT_ID(fence), fence + 0 * LAST_INSERT_ID(0)))"...)
	b = appendAcquireTakeover(b, []byte("VALUES(token)"), []byte("VALUES(owner)"), []byte("VALUES(expires_at)"))
	if returning {
		b = append(b, " RETURNING "+leaseCols...)
	}
	return string(b)
}

// leaseCols are the columns of a lease row an acquire is answered from:
// RETURNING of a batch's upsert (MariaDB), the SELECT after it (MySQL),
// and Acquire's read of a key found held. See leaseRow.
const leaseCols = "lock_key, token, owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)"

// leaseRow is a row read as leaseCols.
type leaseRow struct {
	key, token, owner string
	fence             uint64
	us                int64 // left of the lease, by the server's clock
}

// dest returns the Scan destinations of leaseCols.
func (r *leaseRow) dest() []any { return []any{&r.key, &r.token, &r.owner, &r.fence, &r.us} }

// acquireResult is the answer to p's acquire from the row of p.Key as the
// acquire statement left it: a grant with the row's fence when p's token
// holds it, otherwise a *driver.HeldError naming the holder.
func (r *leaseRow) acquireResult(p driver.AcquireParams) driver.AcquireResult {
	if r.token == p.Token {
		return driver.AcquireResult{Grant: driver.Grant{Fence: r.fence}}
	}
	return driver.AcquireResult{Err: &driver.HeldError{Owner: r.owner, TTL: fromMicros(r.us)}}
}

// leaseRowsSQL is "SELECT " + leaseCols + " FROM t WHERE lock_key IN
// (keys)".
func (s *Store) leaseRowsSQL(keys []string) string {
	n := 200
	for _, k := range keys {
		n += 6 + 2*len(k)
	}
	b := make([]byte, 0, n)
	b = append(b, "SELECT "+leaseCols+" FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE lock_key IN ("...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendHex(b, k)
	}
	return string(append(b, ')'))
}

// queryLeaseRows runs q, which reads leaseCols, and returns its rows.
func queryLeaseRows(ctx context.Context, db querier, q string) ([]leaseRow, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leaseRow
	for rows.Next() {
		var r leaseRow
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// leaseHolder reads the owner and remaining TTL of key's lease, and reports
// whether it is live. A failed read still reports a live lease with nothing
// known about it: the acquire statement just said the key was held.
func (s *Store) leaseHolder(ctx context.Context, key string) (*driver.HeldError, bool) {
	var r leaseRow
	err := s.db.QueryRowContext(ctx, s.leaseRowsSQL([]string{key})).Scan(r.dest()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false
	case err != nil:
		return &driver.HeldError{}, true
	case r.us <= 0:
		return nil, false
	}
	return &driver.HeldError{Owner: r.owner, TTL: fromMicros(r.us)}, true
}

// leaseRelease ends or shortens the lease in one token-checked UPDATE. It
// clears the token, so that the released token can renew or release nothing
// more, and keeps the owner, which a MinHold lease still shows.
func (s *Store) leaseRelease(ctx context.Context, p driver.ReleaseParams) error {
	if p.Token == "" {
		return driver.ErrNotHeld // no grant has an empty token
	}
	n, err := s.execRows(ctx, s.leaseReleaseSQL([]leasePair{{p.Key, p.Token}}, []time.Duration{p.KeepFor}))
	if err != nil {
		return s.wrap(fmt.Sprintf("release %q", p.Key), err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// leaseReleaseSQL is the release statement for pairs (keys distinct),
// pairs[i] ending keepFor[i] from now:
//
//	UPDATE t SET token = '', expires_at = now [+ keep]   -- or CASE lock_key WHEN k THEN ... END
//	WHERE lock_key = k AND token = t AND expires_at > now -- or IN lists, see appendPairFilter
//
// The affected-row count is the number of leases released, whatever the
// DSN's clientFoundRows: every matched row changes (its token is cleared).
func (s *Store) leaseReleaseSQL(pairs []leasePair, keepFor []time.Duration) string {
	keys := make([]string, len(pairs))
	n := 300
	for i, k := range pairs {
		keys[i] = k.key
		n += 100 + 6*len(k.key) + 2*len(k.token)
	}
	b := make([]byte, 0, n)
	b = s.appendReleaseUpdate(b, keys, keepFor)
	b = append(b, " WHERE "...)
	b = appendPairFilter(b, "", pairs)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	return string(b)
}

// leaseForceRelease ends key's live mutex lease and deletes the live
// entries of its read-write lock or semaphore, whoever holds them: two
// statements.
func (s *Store) leaseForceRelease(ctx context.Context, key string) error {
	n, err := s.endLease(ctx, key)
	if err != nil {
		return s.wrap(fmt.Sprintf("force release %q", key), err)
	}
	m, err := s.kindForceRelease(ctx, key)
	if err != nil {
		return s.wrap(fmt.Sprintf("force release %q", key), err)
	}
	if n+m == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// endLease ends key's live lease row whoever holds it, in either mode (in
// connection mode the row's lease is a MinHold lease left by a release),
// and returns the number of rows changed: 0 when no lease was live.
func (s *Store) endLease(ctx context.Context, key string) (int64, error) {
	b := make([]byte, 0, 160+2*len(key))
	b = append(b, "UPDATE "...)
	b = append(b, s.qt...)
	b = append(b, " SET token = '', expires_at = UTC_TIMESTAMP(6) WHERE lock_key = "...)
	b = appendHex(b, key)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	return s.execRows(ctx, string(b))
}

// execRows runs a statement and returns the number of affected rows.
func (s *Store) execRows(ctx context.Context, q string) (int64, error) {
	return rowsAffected(s.db.ExecContext(ctx, q))
}

// rowsAffected returns the number of rows a statement that returned res
// and err changed.
func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// leasePair is one distinct (key, token) of a batch.
type leasePair struct{ key, token string }

// renewLease is one distinct lease of a renewal batch: a mutex's (mode
// driver.ModeMutex), a row of the lock table, or an entry of a read-write
// lock or semaphore, a row of the holds table.
type renewLease struct {
	leasePair
	mode driver.Mode
}

// leaseRenew renews a batch with one UPDATE per chunk of up to 5,000 leases
// (or 4 MiB of SQL). For mutexes alone:
//
//	UPDATE t m SET m.expires_at = now + ttl   -- or CASE m.lock_key WHEN k THEN now + ttl_k ... END
//	WHERE m.lock_key IN (k1, k2, ...) AND (m.lock_key, m.token) IN ((k1, t1), ...)
//	  AND m.expires_at > now
//
// The key list lets the optimizer read just those primary-key entries; the
// row comparison checks each token. Entries of read-write locks and
// semaphores are rows of the holds table, matched by (lock_key, token),
// its primary key, and the mode they were granted in, and only as holds
// (state 0: not a waiting writer, not released; see appendEntryLive). A chunk with both
// renews both tables in one multi-table UPDATE driven by a two-row derived
// table, each row outer-joined to one table's leases:
//
//	UPDATE (SELECT 1 AS side UNION ALL SELECT 2) d
//	LEFT JOIN t m ON d.side = 1 AND <the mutexes' condition above>
//	LEFT JOIN t_holds h ON d.side = 2 AND (h.lock_key, h.token) IN (...)
//	  AND h.mode = m AND h.state = 0 AND h.expires_at > now
//	SET m.expires_at = ..., h.expires_at = ...
//
// so that a mixed batch costs the round trips a batch of mutexes does.
// Every matched row changes (its expiry moves to the statement's now +
// TTL), so the affected-row count equals the number of leases renewed
// whether or not the DSN sets clientFoundRows. When it equals the number of
// leases in the chunk, as it does unless a lease was lost, the chunk took
// one round trip. Otherwise one SELECT of the same leases (a UNION ALL of
// the two tables' for a mixed chunk) tells which are still held: tokens
// are unique per grant, so a lease that the UPDATE did not match cannot
// match later.
//
// A multi-statement UPDATE+SELECT would need the caller to enable
// multiStatements, and MySQL has no UPDATE ... RETURNING; the count check
// keeps the usual case at one round trip without either.
func (s *Store) leaseRenew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	out := make([]error, len(ps))
	// Distinct leases, in order, and where each came from; the TTL of
	// mutexes by key, of entries by token.
	idx := make(map[renewLease][]int, len(ps))
	leases := make([]renewLease, 0, len(ps))
	ttlKey := make(map[string]int64)
	ttlTok := make(map[string]int64)
	for i, p := range ps {
		if p.Mode > driver.ModePermit {
			out[i] = fmt.Errorf("%w: mysqlstore: renew %q: unknown lock mode %v", driver.ErrUnsupported, p.Key, p.Mode)
			continue
		}
		l := renewLease{leasePair{p.Key, p.Token}, p.Mode}
		if _, ok := idx[l]; !ok {
			leases = append(leases, l)
		}
		idx[l] = append(idx[l], i)
		if p.Mode == driver.ModeMutex {
			ttlKey[p.Key] = max(ttlKey[p.Key], micros(p.TTL))
		} else {
			ttlTok[p.Token] = max(ttlTok[p.Token], micros(p.TTL))
		}
	}

	for start := 0; start < len(leases); {
		end, size := start, 0
		for end < len(leases) && end-start < renewMaxLeases && (size < renewMaxBytes || end == start) {
			size += 4*len(leases[end].key) + 4*len(leases[end].token) + 80
			end++
		}
		chunk := leases[start:end]
		start = end

		n, err := s.execRows(ctx, s.leaseRenewSQL(chunk, ttlKey, ttlTok))
		if err != nil {
			return nil, s.wrap(fmt.Sprintf("renew %d leases", len(ps)), err)
		}
		if n == int64(len(chunk)) {
			continue
		}
		held, err := s.renewedLeases(ctx, chunk)
		if err != nil {
			return nil, s.wrap(fmt.Sprintf("renew %d leases", len(ps)), err)
		}
		for _, l := range chunk {
			if !held[l] {
				for _, i := range idx[l] {
					out[i] = driver.ErrNotHeld
				}
			}
		}
	}
	return out, nil
}

// splitRenew splits a renewal chunk into its mutexes and its entries of
// read-write locks and semaphores.
func splitRenew(chunk []renewLease) (mutexes []leasePair, entries []renewLease) {
	for _, l := range chunk {
		if l.mode == driver.ModeMutex {
			mutexes = append(mutexes, l.leasePair)
		} else {
			entries = append(entries, l)
		}
	}
	return mutexes, entries
}

// leaseRenewSQL is leaseRenew's UPDATE for chunk.
func (s *Store) leaseRenewSQL(chunk []renewLease, ttlKey, ttlTok map[string]int64) string {
	mutexes, entries := splitRenew(chunk)
	b := make([]byte, 0, 400+len(chunk)*(80+6*len(chunk[0].key)+4*len(chunk[0].token)))
	switch {
	case len(entries) == 0:
		b = append(b, "UPDATE "...)
		b = append(b, s.qt...)
		b = append(b, " m SET "...)
		b = appendMutexRenewSet(b, mutexes, ttlKey)
		b = append(b, " WHERE "...)
		b = appendMutexLive(b, mutexes)
	case len(mutexes) == 0:
		b = append(b, "UPDATE "...)
		b = append(b, s.qHolds...)
		b = append(b, " h SET "...)
		b = appendEntryRenewSet(b, entries, ttlTok)
		b = append(b, " WHERE "...)
		b = appendEntryLive(b, entries)
	default:
		b = append(b, "UPDATE (SELECT 1 AS side UNION ALL SELECT 2) d LEFT JOIN "...)
		b = append(b, s.qt...)
		b = append(b, " m ON d.side = 1 AND "...)
		b = appendMutexLive(b, mutexes)
		b = append(b, " LEFT JOIN "...)
		b = append(b, s.qHolds...)
		b = append(b, " h ON d.side = 2 AND "...)
		b = appendEntryLive(b, entries)
		b = append(b, " SET "...)
		b = appendMutexRenewSet(b, mutexes, ttlKey)
		b = append(b, ", "...)
		b = appendEntryRenewSet(b, entries, ttlTok)
	}
	return string(b)
}

// appendMutexRenewSet appends "m.expires_at = ..." for the renewal of
// mutexes.
func appendMutexRenewSet(b []byte, mutexes []leasePair, ttlKey map[string]int64) []byte {
	keys := make([]string, len(mutexes))
	for i, k := range mutexes {
		keys[i] = k.key
	}
	b = append(b, "m.expires_at = "...)
	return appendExpiresBy(b, "m.", "lock_key", keys, func(b []byte, i int) []byte { return appendExpiryUS(b, ttlKey[keys[i]]) })
}

// appendEntryRenewSet appends "h.expires_at = ..." for the renewal of
// entries.
func appendEntryRenewSet(b []byte, entries []renewLease, ttlTok map[string]int64) []byte {
	toks := make([]string, len(entries))
	for i, e := range entries {
		toks[i] = e.token
	}
	b = append(b, "h.expires_at = "...)
	return appendExpiresBy(b, "h.", "token", toks, func(b []byte, i int) []byte { return appendExpiryUS(b, ttlTok[toks[i]]) })
}

// appendMutexLive appends the condition that a row of the lock table,
// aliased m, is the live lease of one of mutexes.
func appendMutexLive(b []byte, mutexes []leasePair) []byte {
	b = appendPairFilter(b, "m.", mutexes)
	return append(b, " AND m.expires_at > UTC_TIMESTAMP(6)"...)
}

// appendEntryLive appends the condition that a row of the holds table,
// aliased h, is the live hold of one of entries, in the entry's mode:
//
//	(h.lock_key, h.token) IN ((k, t), ...) AND h.mode = m
//	  AND h.state = 0 AND h.expires_at > now
//
// The pairs are exactly the primary key, (lock_key, token), which the
// optimizer serves as a range of point lookups (MySQL uses a row
// constructor's IN for an index only where its columns are a prefix of the
// index); entries of more than one mode check theirs with "(h.lock_key,
// h.token, h.mode) IN (...)" as well.
func appendEntryLive(b []byte, entries []renewLease) []byte {
	pairs := make([]leasePair, len(entries))
	same := true
	for i, e := range entries {
		pairs[i] = e.leasePair
		same = same && e.mode == entries[0].mode
	}
	if len(entries) == 1 {
		b = appendPairFilter(b, "h.", pairs)
	} else {
		b = append(b, "(h.lock_key, h.token) IN ("...)
		b = appendTuples(b, entries, false)
		b = append(b, ')')
	}
	if same {
		b = append(b, " AND h.mode = "...)
		b = strconv.AppendUint(b, uint64(entries[0].mode), 10)
	} else {
		b = append(b, " AND (h.lock_key, h.token, h.mode) IN ("...)
		b = appendTuples(b, entries, true)
		b = append(b, ')')
	}
	return append(b, " AND h.state = "+strconv.Itoa(stateHeld)+" AND h.expires_at > UTC_TIMESTAMP(6)"...)
}

// appendTuples appends "(k, t), ..." for entries, or with mode "(k, t, m),
// ...".
func appendTuples(b []byte, entries []renewLease, mode bool) []byte {
	for i, e := range entries {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendHex(b, e.key)
		b = append(b, ", "...)
		b = appendHex(b, e.token)
		if mode {
			b = append(b, ", "...)
			b = strconv.AppendUint(b, uint64(e.mode), 10)
		}
		b = append(b, ')')
	}
	return b
}

// renewedLeases returns which leases of chunk are live: after a renewal
// whose count says that some were not.
func (s *Store) renewedLeases(ctx context.Context, chunk []renewLease) (map[renewLease]bool, error) {
	mutexes, entries := splitRenew(chunk)
	b := make([]byte, 0, 400+len(chunk)*(40+6*len(chunk[0].key)+2*len(chunk[0].token)))
	if len(mutexes) > 0 {
		b = append(b, "SELECT 0, m.lock_key, m.token FROM "...)
		b = append(b, s.qt...)
		b = append(b, " m WHERE "...)
		b = appendMutexLive(b, mutexes)
	}
	if len(entries) > 0 {
		if len(mutexes) > 0 {
			b = append(b, " UNION ALL "...)
		}
		b = append(b, "SELECT h.mode, h.lock_key, h.token FROM "...)
		b = append(b, s.qHolds...)
		b = append(b, " h WHERE "...)
		b = appendEntryLive(b, entries)
	}
	rows, err := s.db.QueryContext(ctx, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[renewLease]bool, len(chunk))
	for rows.Next() {
		var mode uint8
		var k, t []byte
		if err := rows.Scan(&mode, &k, &t); err != nil {
			return nil, err
		}
		found[renewLease{leasePair{string(k), string(t)}, driver.Mode(mode)}] = true
	}
	return found, rows.Err()
}

// appendPairFilter appends "lock_key IN (...) AND (lock_key, token) IN
// ((...), ...)", or for one pair "lock_key = k AND token = t", each column
// prefixed with alias ("" or "m.").
func appendPairFilter(b []byte, alias string, pairs []leasePair) []byte {
	if len(pairs) == 1 {
		b = append(b, alias...)
		b = append(b, "lock_key = "...)
		b = appendHex(b, pairs[0].key)
		b = append(b, " AND "...)
		b = append(b, alias...)
		b = append(b, "token = "...)
		return appendHex(b, pairs[0].token)
	}
	b = append(b, alias...)
	b = append(b, "lock_key IN ("...)
	for i, k := range pairs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendHex(b, k.key)
	}
	b = append(b, ") AND ("...)
	b = append(b, alias...)
	b = append(b, "lock_key, "...)
	b = append(b, alias...)
	b = append(b, "token) IN ("...)
	for i, k := range pairs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendPair(b, k)
		b = append(b, ')')
	}
	return append(b, ')')
}

// appendPair appends "X'key', X'token'".
func appendPair(b []byte, p leasePair) []byte {
	b = appendHex(b, p.key)
	b = append(b, ", "...)
	return appendHex(b, p.token)
}

// Conditions for leasePairs.
const (
	leaseLive          = " AND expires_at > UTC_TIMESTAMP(6)"
	leaseLiveForUpdate = leaseLive + " FOR UPDATE"
)

// leasePairs returns which of pairs have a row with that key and token
// that also meets cond (leaseLive, leaseLiveForUpdate or "").
func (s *Store) leasePairs(ctx context.Context, db querier, pairs []leasePair, cond string) (map[leasePair]bool, error) {
	b := make([]byte, 0, 100+len(cond)+len(pairs)*(20+4*len(pairs[0].key)+2*len(pairs[0].token)))
	b = append(b, "SELECT lock_key, token FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE "...)
	b = appendPairFilter(b, "", pairs)
	b = append(b, cond...)
	rows, err := db.QueryContext(ctx, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[leasePair]bool, len(pairs))
	for rows.Next() {
		var k, t []byte
		if err := rows.Scan(&k, &t); err != nil {
			return nil, err
		}
		found[leasePair{string(k), string(t)}] = true
	}
	return found, rows.Err()
}

// readNow is the UTC time when it is evaluated, where UTC_TIMESTAMP(6) is
// the statement's start: a row read by the statement was written by a
// statement that began before readNow, so its time left, measured from
// readNow, is never more than its TTL. (A renewal that began after
// UTC_TIMESTAMP(6) and committed before the read would seem to have more.)
const readNow = "(UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)"

// leaseLeases lists live leases (MinHold leases after a release included):
// the mutexes' and the entries of read-write locks and semaphores, in one
// SELECT.
func (s *Store) leaseLeases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	b := make([]byte, 0, 800+8*len(prefix))
	b = append(b, "SELECT lock_key, owner, fence, TIMESTAMPDIFF(MICROSECOND, "+readNow+", expires_at), FALSE, 0, 0, 0 FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE expires_at > "+readNow...)
	b = appendPrefixFilter(b, prefix)
	b = append(b, " UNION ALL SELECT lock_key, owner, fence, TIMESTAMPDIFF(MICROSECOND, "+readNow+", expires_at), FALSE, mode, lim, state FROM "...)
	b = append(b, s.qHolds...)
	b = append(b, " WHERE expires_at > "+readNow...)
	b = appendPrefixFilter(b, prefix)
	b = append(b, " ORDER BY 1, 6, 3"...)
	return s.queryLeases(ctx, string(b))
}
