-- Issue 14: shards in the ledger's keys, past ticks in trigger requests, and
-- the catalog of job definitions made at run time (ledger.Catalog) with its
-- audit list. Rows that exist become shard 0, the unsharded key, and
-- trigger requests without a tick (trigger-now). ADD COLUMN with a constant
-- default rewrites nothing (PostgreSQL 11+); the keys and indexes are
-- rebuilt once.

-- Claims: the key is (job, tick, trigger_id, shard). The primary key's
-- name is PostgreSQL's choice (truncated for a long table name), so it is
-- looked up.
ALTER TABLE {{.Qualified "_claims"}} ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0);
DO $$
DECLARE pk name;
BEGIN
	SELECT conname INTO STRICT pk FROM pg_constraint
	WHERE conrelid = '{{.Qualified "_claims"}}'::regclass AND contype = 'p';
	EXECUTE format('ALTER TABLE {{.Qualified "_claims"}} DROP CONSTRAINT %I, ADD PRIMARY KEY (job, tick, trigger_id, shard)', pk);
END $$;

-- Runs: the key is (job, tick, trigger_id, shard, attempt), and the three
-- listing indexes follow the new listing order (tick descending, then job,
-- trigger_id and shard ascending, attempt descending). shards is data: the
-- job's shard count when it ran, 0 for a row from before this migration.
ALTER TABLE {{.Qualified "_runs"}}
	ADD COLUMN shard integer NOT NULL DEFAULT 0 CHECK (shard >= 0),
	ADD COLUMN shards integer NOT NULL DEFAULT 0 CHECK (shards >= 0);
ALTER TABLE {{.Qualified "_runs"}} REPLICA IDENTITY DEFAULT;
DROP INDEX {{.Schema}}.{{.Ident "_runs_job"}};
DROP INDEX {{.Schema}}.{{.Ident "_runs_tick"}};
DROP INDEX {{.Schema}}.{{.Ident "_runs_running"}};
CREATE UNIQUE INDEX {{.Ident "_runs_job"}} ON {{.Qualified "_runs"}} (job, tick DESC, trigger_id, shard, attempt DESC);
CREATE INDEX {{.Ident "_runs_tick"}} ON {{.Qualified "_runs"}} (tick DESC, job, trigger_id, shard, attempt DESC);
CREATE INDEX {{.Ident "_runs_running"}} ON {{.Qualified "_runs"}} (tick DESC, job, trigger_id, shard, attempt DESC) WHERE status = 'running';
ALTER TABLE {{.Qualified "_runs"}} REPLICA IDENTITY USING INDEX {{.Ident "_runs_job"}};

-- Trigger requests: tick is the past tick to run (backfill, re-run), NULL
-- for a trigger-now; rerun runs it again as a new attempt.
ALTER TABLE {{.Qualified "_triggers"}}
	ADD COLUMN tick timestamptz,
	ADD COLUMN rerun boolean NOT NULL DEFAULT false;

-- Job definitions made at run time: one row per job ever defined. A delete
-- keeps the row (deleted true) so that version, the job's change counter,
-- goes on rising when the job is created again. def is the caller's
-- encoding (JSON), updated_at the database's now() at the last change.
CREATE TABLE {{.Qualified "_defs"}} (
	job        text COLLATE "C" PRIMARY KEY,
	def        text NOT NULL,
	version    bigint NOT NULL CHECK (version > 0),
	deleted    boolean NOT NULL,
	updated_at timestamptz NOT NULL
);

-- The audit list: who did what to which job (job '' for none), newest
-- first by seq. Each change of a definition inserts its row in the same
-- statement as the change.
CREATE TABLE {{.Qualified "_audit"}} (
	seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at     timestamptz NOT NULL,
	who    text NOT NULL,
	job    text COLLATE "C" NOT NULL,
	action text NOT NULL,
	detail text NOT NULL
);
CREATE INDEX {{.Ident "_audit_job"}} ON {{.Qualified "_audit"}} (job, seq);
