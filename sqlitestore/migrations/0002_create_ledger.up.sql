-- The tick ledger of package schedule (driver.Ledger). Its tables are named
-- after the lock table. Times are integer unix microseconds; claim, record
-- and request times are SQLite's clock. Ticks are the scheduled instants
-- (for a trigger-now run, the request's time).

-- One row per claimed (job, tick, trigger), kept until expires_at and
-- deleted by Prune after it.
CREATE TABLE IF NOT EXISTS {{.Ident "_claims"}} (
    job        TEXT    NOT NULL,
    tick       INTEGER NOT NULL,
    "trigger"  TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    node       TEXT    NOT NULL,
    claimed_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (job, tick, "trigger")
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {{.Ident "_claims_expires_idx"}} ON {{.Ident "_claims"}} (expires_at);

-- One row per attempt at a tick of a job. fence holds the uint64 fence's
-- bits; started_at and ended_at are the node's clock, NULL when zero.
CREATE TABLE IF NOT EXISTS {{.Ident "_runs"}} (
    job         TEXT    NOT NULL,
    tick        INTEGER NOT NULL,
    "trigger"   TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    node        TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    started_at  INTEGER,
    ended_at    INTEGER,
    status      TEXT    NOT NULL,
    error       TEXT    NOT NULL,
    output      TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL
);
-- The record's key, in the order Runs lists one job's history.
CREATE UNIQUE INDEX IF NOT EXISTS {{.Ident "_runs_job_idx"}}
    ON {{.Ident "_runs"}} (job, tick DESC, "trigger", attempt DESC);
-- Every job's history, in the order Runs lists it.
CREATE INDEX IF NOT EXISTS {{.Ident "_runs_tick_idx"}}
    ON {{.Ident "_runs"}} (tick DESC, job, "trigger", attempt DESC);
-- Prune by age.
CREATE INDEX IF NOT EXISTS {{.Ident "_runs_recorded_idx"}} ON {{.Ident "_runs"}} (recorded_at);

-- One row per job ever paused; paused is 1 while it is.
CREATE TABLE IF NOT EXISTS {{.Ident "_jobs"}} (
    job        TEXT    NOT NULL PRIMARY KEY,
    paused     INTEGER NOT NULL,
    changed_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Pending trigger-now requests; seq keeps the order they came in.
CREATE TABLE IF NOT EXISTS {{.Ident "_triggers"}} (
    seq          INTEGER PRIMARY KEY,
    job          TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    requested_at INTEGER NOT NULL,
    UNIQUE (job, id)
);
