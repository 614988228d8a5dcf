-- One row per lock key, never deleted: the fence survives releases and
-- restarts. Times are integer unix microseconds from SQLite's clock.
-- Not STRICT, so that sqlite3 shells older than 3.37 can still open the file.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    "key"       TEXT    NOT NULL PRIMARY KEY,
    token       TEXT    NOT NULL DEFAULT '',
    owner       TEXT    NOT NULL DEFAULT '',
    fence       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
