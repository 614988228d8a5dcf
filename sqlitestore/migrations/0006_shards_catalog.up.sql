-- Sharded jobs (ledger.ClaimParams.Shard, RunRecord.Shard and Shards),
-- past ticks in trigger requests (TriggerRequest.Tick and Rerun), and the
-- catalog of job definitions made at run time with its audit list
-- (ledger.Catalog). Existing claims and run records become shard 0.

-- Claims: the shard joins the primary key. SQLite cannot change a table's
-- primary key, so the table is rebuilt under a new name, filled from the
-- old one, and renamed; its expiry index goes with the old table and is
-- made again.
CREATE TABLE {{.Ident "_claims_0006"}} (
    job        TEXT    NOT NULL,
    tick       INTEGER NOT NULL,
    "trigger"  TEXT    NOT NULL,
    shard      INTEGER NOT NULL,
    token      TEXT    NOT NULL,
    node       TEXT    NOT NULL,
    claimed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (job, tick, "trigger", shard)
) WITHOUT ROWID;
INSERT INTO {{.Ident "_claims_0006"}} (job, tick, "trigger", shard, token, node, claimed_at, expires_at)
    SELECT job, tick, "trigger", 0, token, node, claimed_at, expires_at FROM {{.Ident "_claims"}};
DROP TABLE {{.Ident "_claims"}};
ALTER TABLE {{.Ident "_claims_0006"}} RENAME TO {{.Ident "_claims"}};
CREATE INDEX {{.Ident "_claims_expires_idx"}} ON {{.Ident "_claims"}} (expires_at);

-- Run records: shard is part of the key, shards (the job's shard count when
-- it ran; 0 when not sharded) is data. The key's unique index and the
-- listing indexes are made again with the shard in the listing order:
-- tick descending, job, trigger and shard ascending, attempt descending.
ALTER TABLE {{.Ident "_runs"}} ADD COLUMN shard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {{.Ident "_runs"}} ADD COLUMN shards INTEGER NOT NULL DEFAULT 0;
DROP INDEX {{.Ident "_runs_job_idx"}};
DROP INDEX {{.Ident "_runs_tick_idx"}};
DROP INDEX {{.Ident "_runs_running_idx"}};
CREATE UNIQUE INDEX {{.Ident "_runs_job_idx"}}
    ON {{.Ident "_runs"}} (job, tick DESC, "trigger", shard, attempt DESC);
CREATE INDEX {{.Ident "_runs_tick_idx"}}
    ON {{.Ident "_runs"}} (tick DESC, job, "trigger", shard, attempt DESC);
CREATE INDEX {{.Ident "_runs_running_idx"}}
    ON {{.Ident "_runs"}} (tick DESC, job, "trigger", shard, attempt DESC) WHERE status = 'running';

-- Trigger requests: the past tick a backfill or a re-run asks for (unix
-- microseconds; NULL for a trigger-now) and whether to run it again.
ALTER TABLE {{.Ident "_triggers"}} ADD COLUMN tick INTEGER;
ALTER TABLE {{.Ident "_triggers"}} ADD COLUMN rerun INTEGER NOT NULL DEFAULT 0;

-- Job definitions made at run time, one row per job ever defined. def is
-- the caller's encoding, NULL once deleted: the row stays, so that the
-- job's version keeps rising across a delete and a new create. updated_at
-- is SQLite's clock at the last change.
CREATE TABLE IF NOT EXISTS {{.Ident "_jobdefs"}} (
    job        TEXT    NOT NULL PRIMARY KEY,
    def        TEXT,
    version    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- The audit list: who did what to which job ('' for none), at SQLite's
-- clock. seq is the listing order (AUTOINCREMENT: never reused).
CREATE TABLE IF NOT EXISTS {{.Ident "_audit"}} (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    who    TEXT    NOT NULL,
    job    TEXT    NOT NULL,
    action TEXT    NOT NULL,
    detail TEXT    NOT NULL
);
-- One job's entries, newest first, without reading the others.
CREATE INDEX IF NOT EXISTS {{.Ident "_audit_job_idx"}} ON {{.Ident "_audit"}} (job, seq);
