-- ledger.Stats: per-minute rollups of the run records, kept by triggers in
-- the transaction that writes the records, so that RunStats reads at most
-- one row per (minute, status, lateness bucket) of its window however many
-- records the window holds (a GROUP BY over a million records of a day
-- takes seconds). One row per minute of tick (unix µs, floored), status
-- and lateness bucket (ledger.LatenessBounds; -1 for a record without a
-- lateness: not started, or a retry); n counts the records. An insert adds
-- one, a delete (Prune) takes one away, and an update (a running record
-- replaced by its outcome) moves one. A missing row is made with a guarded
-- INSERT ... SELECT, not INSERT OR IGNORE: inside a trigger the conflict
-- policy of the statement that fired it (RecordRuns' upsert) would win.
CREATE TABLE IF NOT EXISTS {{.Ident "_runs_rollup"}} (
    minute INTEGER NOT NULL,
    status TEXT    NOT NULL,
    late   INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (minute, status, late)
) WITHOUT ROWID;

INSERT INTO {{.Ident "_runs_rollup"}} (minute, status, late, n)
SELECT {{.Minute "tick"}}, status, {{.Late "started_at" "tick" "attempt"}}, count(*)
FROM {{.Ident "_runs"}} GROUP BY 1, 2, 3;

CREATE TRIGGER IF NOT EXISTS {{.Ident "_runs_rollup_insert"}} AFTER INSERT ON {{.Ident "_runs"}} BEGIN
    INSERT INTO {{.Ident "_runs_rollup"}} (minute, status, late, n)
        SELECT {{.Minute "new.tick"}}, new.status, {{.Late "new.started_at" "new.tick" "new.attempt"}}, 0
        WHERE NOT EXISTS (SELECT 1 FROM {{.Ident "_runs_rollup"}}
            WHERE minute = {{.Minute "new.tick"}} AND status = new.status AND late = {{.Late "new.started_at" "new.tick" "new.attempt"}});
    UPDATE {{.Ident "_runs_rollup"}} SET n = n + 1
        WHERE minute = {{.Minute "new.tick"}} AND status = new.status AND late = {{.Late "new.started_at" "new.tick" "new.attempt"}};
END;

CREATE TRIGGER IF NOT EXISTS {{.Ident "_runs_rollup_delete"}} AFTER DELETE ON {{.Ident "_runs"}} BEGIN
    UPDATE {{.Ident "_runs_rollup"}} SET n = n - 1
        WHERE minute = {{.Minute "old.tick"}} AND status = old.status AND late = {{.Late "old.started_at" "old.tick" "old.attempt"}};
END;

CREATE TRIGGER IF NOT EXISTS {{.Ident "_runs_rollup_update"}} AFTER UPDATE OF tick, status, started_at, attempt ON {{.Ident "_runs"}}
WHEN old.status IS NOT new.status OR old.started_at IS NOT new.started_at OR old.tick <> new.tick OR old.attempt <> new.attempt BEGIN
    UPDATE {{.Ident "_runs_rollup"}} SET n = n - 1
        WHERE minute = {{.Minute "old.tick"}} AND status = old.status AND late = {{.Late "old.started_at" "old.tick" "old.attempt"}};
    INSERT INTO {{.Ident "_runs_rollup"}} (minute, status, late, n)
        SELECT {{.Minute "new.tick"}}, new.status, {{.Late "new.started_at" "new.tick" "new.attempt"}}, 0
        WHERE NOT EXISTS (SELECT 1 FROM {{.Ident "_runs_rollup"}}
            WHERE minute = {{.Minute "new.tick"}} AND status = new.status AND late = {{.Late "new.started_at" "new.tick" "new.attempt"}});
    UPDATE {{.Ident "_runs_rollup"}} SET n = n + 1
        WHERE minute = {{.Minute "new.tick"}} AND status = new.status AND late = {{.Late "new.started_at" "new.tick" "new.attempt"}};
END;
