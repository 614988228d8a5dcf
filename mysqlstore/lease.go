package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

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
//	          IF(token = ours, LAST_INSERT_ID(fence), fence + 0 * LAST_INSERT_ID(0))),
//	  token = IF(expires_at <= now, ours, token), ... , expires_at = IF(...)  -- last
//
// The OK packet's insert id is the argument of the statement's last
// LAST_INSERT_ID(expr) call: the fence when the key was granted (a new row,
// an expired lease, or a retry by the same token whose reply was lost), and 0
// when another token holds it. That needs no AUTO_INCREMENT column and does
// not depend on how the DSN counts affected rows (clientFoundRows).
// expires_at is assigned last because MySQL evaluates the assignments of an
// UPDATE from left to right, each seeing the columns assigned before it.
// Only when the key is held does a second statement read the holder's owner
// and remaining TTL.
func (s *Store) leaseAcquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	q := s.leaseAcquireSQL(p)
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
			return driver.Grant{Fence: uint64(id)}, nil
		}
		held, live := s.leaseHolder(ctx, p.Key)
		if live {
			return driver.Grant{}, held
		}
		// The lease ended between the two statements: try once more.
	}
	return driver.Grant{}, &driver.HeldError{}
}

func (s *Store) leaseAcquireSQL(p driver.AcquireParams) string {
	expiry := appendExpiry(nil, p.TTL)
	b := make([]byte, 0, 900+4*len(p.Key)+4*len(p.Token)+2*len(p.Owner))
	b = s.appendAcquireInsert(b, p, "VALUES (")
	b = append(b, expiry...)
	b = append(b, ") ON DUPLICATE KEY UPDATE fence = IF("+acquireExpired+", LAST_INSERT_ID(fence + 1), IF(token = "...)
	b = appendHex(b, p.Token)
	b = append(b, ", LAST_INSERT_ID(fence), fence + 0 * LAST_INSERT_ID(0)))"...)
	b = appendAcquireTakeover(b, p, expiry)
	return string(b)
}

// leaseHolder reads the owner and remaining TTL of key's lease, and reports
// whether it is live. A failed read still reports a live lease with nothing
// known about it: the acquire statement just said the key was held.
func (s *Store) leaseHolder(ctx context.Context, key string) (*driver.HeldError, bool) {
	b := make([]byte, 0, 160+2*len(key))
	b = append(b, "SELECT owner, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, key)
	var owner string
	var us int64
	err := s.db.QueryRowContext(ctx, string(b)).Scan(&owner, &us)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false
	case err != nil:
		return &driver.HeldError{}, true
	case us <= 0:
		return nil, false
	}
	return &driver.HeldError{Owner: owner, TTL: fromMicros(us)}, true
}

// leaseRelease ends or shortens the lease in one token-checked UPDATE. It
// clears the token, so that the released token can renew or release nothing
// more, and keeps the owner, which a MinHold lease still shows.
func (s *Store) leaseRelease(ctx context.Context, p driver.ReleaseParams) error {
	b := make([]byte, 0, 260+2*len(p.Key)+2*len(p.Token))
	b = s.appendReleaseUpdate(b, p.KeepFor)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, p.Key)
	b = append(b, " AND token = "...)
	b = appendHex(b, p.Token)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	n, err := s.execRows(ctx, string(b))
	if err != nil {
		return s.wrap(fmt.Sprintf("release %q", p.Key), err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// leaseForceRelease ends key's live lease whoever holds it.
func (s *Store) leaseForceRelease(ctx context.Context, key string) error {
	n, err := s.endLease(ctx, key)
	if err != nil {
		return s.wrap(fmt.Sprintf("force release %q", key), err)
	}
	if n == 0 {
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
	res, err := s.db.ExecContext(ctx, q)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// leasePair is one distinct (key, token) of a renewal batch.
type leasePair struct{ key, token string }

// leaseRenew renews a batch with one UPDATE per chunk of up to 5,000 leases
// (or 4 MiB of SQL):
//
//	UPDATE t SET expires_at = now + ttl   -- or CASE lock_key WHEN k THEN now + ttl_k ... END
//	WHERE lock_key IN (k1, k2, ...) AND (lock_key, token) IN ((k1, t1), ...)
//	  AND expires_at > now
//
// The key list lets the optimizer read just those primary-key entries; the
// row comparison checks each token. Every matched row changes (its expiry
// moves to the statement's now + TTL), so the affected-row count equals the
// number of leases renewed whether or not the DSN sets clientFoundRows. When
// it equals the number of leases in the chunk, as it does unless a lease was
// lost, the chunk took one round trip. Otherwise one SELECT of the same pairs
// tells which leases are still held: tokens are unique per grant, so a pair
// that the UPDATE did not match cannot match later.
//
// A multi-statement UPDATE+SELECT would need the caller to enable
// multiStatements, and MySQL has no UPDATE ... RETURNING; the count check
// keeps the usual case at one round trip without either.
func (s *Store) leaseRenew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	out := make([]error, len(ps))
	// Distinct pairs, in order, and where each came from.
	idx := make(map[leasePair][]int, len(ps))
	pairs := make([]leasePair, 0, len(ps))
	for i, p := range ps {
		k := leasePair{p.Key, p.Token}
		if _, ok := idx[k]; !ok {
			pairs = append(pairs, k)
		}
		idx[k] = append(idx[k], i)
	}
	ttl := make(map[string]int64, len(ps))
	for _, p := range ps {
		ttl[p.Key] = max(ttl[p.Key], micros(p.TTL))
	}

	for start := 0; start < len(pairs); {
		end, size := start, 0
		for end < len(pairs) && end-start < renewMaxLeases && (size < renewMaxBytes || end == start) {
			size += 4*len(pairs[end].key) + 2*len(pairs[end].token) + 80
			end++
		}
		chunk := pairs[start:end]
		start = end

		n, err := s.execRows(ctx, s.leaseRenewSQL(chunk, ttl))
		if err != nil {
			return nil, s.wrap(fmt.Sprintf("renew %d leases", len(ps)), err)
		}
		if n == int64(len(chunk)) {
			continue
		}
		held, err := s.leaseStillHeld(ctx, chunk)
		if err != nil {
			return nil, s.wrap(fmt.Sprintf("renew %d leases", len(ps)), err)
		}
		for _, k := range chunk {
			if !held[k] {
				for _, i := range idx[k] {
					out[i] = driver.ErrNotHeld
				}
			}
		}
	}
	return out, nil
}

func (s *Store) leaseRenewSQL(chunk []leasePair, ttl map[string]int64) string {
	b := make([]byte, 0, 200+len(chunk)*(60+6*len(chunk[0].key)+2*len(chunk[0].token)))
	b = append(b, "UPDATE "...)
	b = append(b, s.qt...)
	b = append(b, " SET expires_at = "...)
	same := true
	first := ttl[chunk[0].key]
	for _, k := range chunk[1:] {
		if ttl[k.key] != first {
			same = false
			break
		}
	}
	if same {
		b = append(b, "UTC_TIMESTAMP(6) + INTERVAL "...)
		b = strconv.AppendInt(b, first, 10)
		b = append(b, " MICROSECOND"...)
	} else {
		b = append(b, "CASE lock_key"...)
		for _, k := range chunk {
			b = append(b, " WHEN "...)
			b = appendHex(b, k.key)
			b = append(b, " THEN UTC_TIMESTAMP(6) + INTERVAL "...)
			b = strconv.AppendInt(b, ttl[k.key], 10)
			b = append(b, " MICROSECOND"...)
		}
		b = append(b, " ELSE expires_at END"...)
	}
	b = append(b, " WHERE "...)
	b = appendPairFilter(b, chunk)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	return string(b)
}

// appendPairFilter appends "lock_key IN (...) AND (lock_key, token) IN
// ((...), ...)".
func appendPairFilter(b []byte, pairs []leasePair) []byte {
	b = append(b, "lock_key IN ("...)
	for i, k := range pairs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendHex(b, k.key)
	}
	b = append(b, ") AND (lock_key, token) IN ("...)
	for i, k := range pairs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendHex(b, k.key)
		b = append(b, ", "...)
		b = appendHex(b, k.token)
		b = append(b, ')')
	}
	return append(b, ')')
}

// leaseStillHeld returns which of pairs hold a live lease.
func (s *Store) leaseStillHeld(ctx context.Context, pairs []leasePair) (map[leasePair]bool, error) {
	b := make([]byte, 0, 100+len(pairs)*(20+4*len(pairs[0].key)+2*len(pairs[0].token)))
	b = append(b, "SELECT lock_key, token FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE "...)
	b = appendPairFilter(b, pairs)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	rows, err := s.db.QueryContext(ctx, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := make(map[leasePair]bool, len(pairs))
	for rows.Next() {
		var k, t []byte
		if err := rows.Scan(&k, &t); err != nil {
			return nil, err
		}
		held[leasePair{string(k), string(t)}] = true
	}
	return held, rows.Err()
}

// leaseLeases lists live leases (MinHold leases after a release included).
func (s *Store) leaseLeases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	b := make([]byte, 0, 260+4*len(prefix))
	b = append(b, "SELECT lock_key, owner, fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE expires_at > UTC_TIMESTAMP(6)"...)
	b = appendPrefixFilter(b, prefix)
	b = append(b, " ORDER BY lock_key"...)
	return s.queryLeases(ctx, string(b), false)
}
