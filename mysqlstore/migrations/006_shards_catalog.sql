-- Issue 14: shards in the ledger's keys, past ticks in trigger requests, and
-- the catalog of job definitions made at run time (ledger.Catalog) with its
-- audit list. Rows that exist become shard 0, the unsharded key, and
-- trigger requests without a tick (trigger-now).
--
-- Each ALTER TABLE is one statement, applied whole or not at all (the table
-- is rebuilt and swapped in), so a run of this migration cut short before it
-- was recorded runs again from the start: an ALTER already made fails with
-- "Duplicate column name", which Migrate takes as made, and the CREATEs are
-- IF NOT EXISTS.

-- Claims: the key is (job, tick, trigger_id, shard).
ALTER TABLE {{table_claims}}
  ADD COLUMN shard INT NOT NULL DEFAULT 0 AFTER trigger_id,
  DROP PRIMARY KEY,
  ADD PRIMARY KEY (job, tick, trigger_id, shard);

-- Runs: the key is (job, tick, trigger_id, shard, attempt), and the three
-- keys in listing order (tick descending, then job, trigger_id and shard
-- ascending, attempt descending: rev_tick, job, trigger_id, shard,
-- rev_attempt ascending) take the shard. shards is data: the job's shard
-- count when it ran, 0 for a row from before this migration.
ALTER TABLE {{table_runs}}
  ADD COLUMN shard INT NOT NULL DEFAULT 0 AFTER trigger_id,
  ADD COLUMN shards INT NOT NULL DEFAULT 0 AFTER attempt,
  DROP PRIMARY KEY,
  ADD PRIMARY KEY (job, rev_tick, trigger_id, shard, rev_attempt),
  DROP KEY by_tick,
  ADD KEY by_tick (rev_tick, job, trigger_id, shard, rev_attempt),
  DROP KEY by_status,
  ADD KEY by_status (status, rev_tick, job, trigger_id, shard, rev_attempt);

-- Trigger requests: tick is the past tick to run (backfill, re-run), NULL
-- for a trigger-now; rerun runs it again as a new attempt.
ALTER TABLE {{table_triggers}}
  ADD COLUMN tick DATETIME(6) NULL,
  ADD COLUMN rerun BOOLEAN NOT NULL DEFAULT 0;

-- Job definitions made at run time: one row per job ever defined. A delete
-- keeps the row (deleted 1) so that version, the job's change counter, goes
-- on rising when the job is created again. def is the caller's encoding,
-- kept byte for byte (ledger.MaxJobDef is 64 KiB, one byte more than a
-- BLOB holds); updated_at is the server's clock at the last change.
CREATE TABLE IF NOT EXISTS {{table_defs}} (
  job        VARBINARY(512) NOT NULL,
  def        MEDIUMBLOB     NOT NULL,
  version    BIGINT         NOT NULL,
  deleted    BOOLEAN        NOT NULL,
  updated_at DATETIME(6)    NOT NULL,
  PRIMARY KEY (job)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The audit list: who did what to which job (job '' for none), newest
-- first by seq, kept byte for byte. Each change of a definition inserts its
-- row in the transaction that makes the change.
CREATE TABLE IF NOT EXISTS {{table_audit}} (
  seq    BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at     DATETIME(6)     NOT NULL,
  who    VARBINARY(512)  NOT NULL,
  job    VARBINARY(512)  NOT NULL,
  action VARBINARY(128)  NOT NULL,
  detail BLOB            NOT NULL,
  PRIMARY KEY (seq),
  KEY by_job (job, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
