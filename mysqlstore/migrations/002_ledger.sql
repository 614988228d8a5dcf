-- The tick ledger of package schedule (driver.Ledger), in four tables named
-- after the lock table ({{table_claims}} is the lock table's name followed by
-- _claims). Names compare byte for byte (VARBINARY), as Go compares strings.
-- Times are UTC. Every time a row records of its own (claimed_at, expires_at,
-- recorded_at, requested_at, updated_at) is the server's UTC_TIMESTAMP(6);
-- ticks and a run's started_at and ended_at are the scheduler's.

-- One row per claimed (job, tick, trigger_id): a tick runs only on the node
-- whose token is here. trigger_id is '' for a scheduled tick. A row may be
-- taken over, or deleted by Prune, once expires_at has passed.
CREATE TABLE IF NOT EXISTS {{table_claims}} (
  job        VARBINARY(512) NOT NULL,
  tick       DATETIME(6)    NOT NULL,
  trigger_id VARBINARY(128) NOT NULL,
  token      VARBINARY(128) NOT NULL,
  node       VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  claimed_at DATETIME(6)    NOT NULL,
  expires_at DATETIME(6)    NOT NULL,
  PRIMARY KEY (job, tick, trigger_id),
  KEY expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Run history: one row per (job, tick, trigger_id, attempt). Runs lists
-- records by tick descending, then job, trigger_id, and attempt descending;
-- rev_tick (minus the tick in microseconds since 1970) and rev_attempt
-- (minus the attempt) make that order ascending, so that both indexes serve
-- it as ranges on any server (MariaDB before 10.8 ignores DESC in indexes):
-- the primary key a job's history, by_tick every job's. started_at and
-- ended_at are NULL when the attempt never started.
CREATE TABLE IF NOT EXISTS {{table_runs}} (
  job         VARBINARY(512)  NOT NULL,
  rev_tick    BIGINT          NOT NULL,
  trigger_id  VARBINARY(128)  NOT NULL,
  rev_attempt INT             NOT NULL,
  tick        DATETIME(6)     NOT NULL,
  attempt     INT             NOT NULL,
  node        VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  fence       BIGINT UNSIGNED NOT NULL,
  started_at  DATETIME(6)     NULL,
  ended_at    DATETIME(6)     NULL,
  status      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  error       MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  output      MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  recorded_at DATETIME(6)     NOT NULL,
  PRIMARY KEY (job, rev_tick, trigger_id, rev_attempt),
  KEY by_tick (rev_tick, job, trigger_id, rev_attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Jobs paused by an operator: every node obeys paused.
CREATE TABLE IF NOT EXISTS {{table_jobs}} (
  job        VARBINARY(512) NOT NULL,
  paused     BOOLEAN        NOT NULL,
  updated_at DATETIME(6)    NOT NULL,
  PRIMARY KEY (job)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Pending trigger-now requests, oldest first by (requested_at, seq).
CREATE TABLE IF NOT EXISTS {{table_triggers}} (
  seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  job          VARBINARY(512)  NOT NULL,
  trigger_id   VARBINARY(128)  NOT NULL,
  requested_at DATETIME(6)     NOT NULL,
  PRIMARY KEY (seq),
  UNIQUE KEY job_trigger (job, trigger_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
