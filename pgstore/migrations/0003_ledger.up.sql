-- The tick ledger of package schedule (driver.Ledger), in four tables named
-- after the lease table. Names compare byte for byte (COLLATE "C"), as Go
-- compares strings. Every time a row records of its own (claimed_at,
-- expires_at, recorded_at, requested_at, updated_at) is the database's now();
-- ticks and a run's started_at and ended_at are the scheduler's.

-- One row per claimed (job, tick, trigger_id): a tick runs only on the node
-- whose token is here. trigger_id is '' for a scheduled tick. A row may be
-- taken over, or deleted by Prune, once expires_at has passed.
CREATE TABLE {{.Qualified "_claims"}} (
	job        text COLLATE "C" NOT NULL,
	tick       timestamptz NOT NULL,
	trigger_id text COLLATE "C" NOT NULL,
	token      text NOT NULL,
	node       text NOT NULL,
	claimed_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (job, tick, trigger_id)
);
CREATE INDEX {{.Ident "_claims_exp"}} ON {{.Qualified "_claims"}} (expires_at);

-- Run history: one row per (job, tick, trigger_id, attempt). The two indexes
-- are in the order Runs lists records (tick descending, then job, trigger_id,
-- attempt descending), one for a job's history and one for every job's, so
-- that a page costs an index range however deep it is. started_at and
-- ended_at are NULL when the attempt never started.
CREATE TABLE {{.Qualified "_runs"}} (
	job         text COLLATE "C" NOT NULL,
	tick        timestamptz NOT NULL,
	trigger_id  text COLLATE "C" NOT NULL,
	attempt     integer NOT NULL,
	node        text NOT NULL,
	fence       bigint NOT NULL,
	started_at  timestamptz,
	ended_at    timestamptz,
	status      text NOT NULL,
	error       text NOT NULL,
	output      text NOT NULL,
	recorded_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX {{.Ident "_runs_job"}} ON {{.Qualified "_runs"}} (job, tick DESC, trigger_id, attempt DESC);
CREATE INDEX {{.Ident "_runs_tick"}} ON {{.Qualified "_runs"}} (tick DESC, job, trigger_id, attempt DESC);
ALTER TABLE {{.Qualified "_runs"}} REPLICA IDENTITY USING INDEX {{.Ident "_runs_job"}};

-- Jobs paused by an operator: every node obeys paused.
CREATE TABLE {{.Qualified "_jobs"}} (
	job        text COLLATE "C" PRIMARY KEY,
	paused     boolean NOT NULL,
	updated_at timestamptz NOT NULL
);

-- Pending trigger-now requests, oldest first by (requested_at, seq).
CREATE TABLE {{.Qualified "_triggers"}} (
	job          text COLLATE "C" NOT NULL,
	trigger_id   text COLLATE "C" NOT NULL,
	requested_at timestamptz NOT NULL,
	seq          bigint GENERATED ALWAYS AS IDENTITY,
	PRIMARY KEY (job, trigger_id)
);
