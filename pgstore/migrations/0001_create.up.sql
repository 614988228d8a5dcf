-- One row per lock key, never deleted: fence is the key's durable counter and
-- survives releases, expiries and restarts. A key is held while expires_at is
-- after the database's now(); token is NULL once the holder released it.
-- pid is the backend of the session holding the key in connection mode, NULL
-- in lease mode.
CREATE TABLE {{.Table}} (
	key         text COLLATE "C" PRIMARY KEY,
	token       text,
	owner       text NOT NULL DEFAULT '',
	fence       bigint NOT NULL CHECK (fence > 0),
	acquired_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	pid         integer
);

COMMENT ON TABLE {{.Table}} IS 'tasklock leases: one row per lock key; fence is the key''s durable counter';
