-- Read-write locks and semaphores (driver.Kinder), and fair queues of
-- mutex waiters (driver.FairQueuer), in three tables named after the lease
-- table. Their keys are a namespace apart from the lease table's: a mutex
-- "x" and a semaphore "x" are different locks. Every expires_at is the
-- database's clock.

-- One row per hold (or writer's claim) of a read-write lock or semaphore:
-- mode is driver.Mode (1 read, 2 write, 3 permit), permits the semaphore's
-- number of permits (0 for a read-write lock), waiting marks a writer's
-- claim to be next (no hold, fence 0). An entry counts while expires_at is
-- after the database's now(); expired ones are deleted by the next acquire
-- of their key.
CREATE TABLE {{.Qualified "_kinds"}} (
	key         text COLLATE "C" NOT NULL,
	token       text COLLATE "C" NOT NULL,
	owner       text NOT NULL,
	mode        smallint NOT NULL CHECK (mode IN (1, 2, 3)),
	permits     integer NOT NULL CHECK (permits >= 0),
	waiting     boolean NOT NULL,
	fence       bigint NOT NULL CHECK (fence >= 0),
	acquired_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (key, token)
);

-- One row per read-write lock or semaphore key that a writer or a permit
-- was granted, never deleted: fence is the key's durable counter
-- (incremented by every writer's and every permit's grant), so fences
-- strictly increase across releases, expiries and restarts, as the lease
-- table's do.
CREATE TABLE {{.Qualified "_kind_keys"}} (
	key   text COLLATE "C" PRIMARY KEY,
	fence bigint NOT NULL CHECK (fence > 0)
);

-- Fair queues of mutex waiters (ObtainOptions.Fair): one row per waiter,
-- served in seq order. Each row is a lease its waiter renews while it
-- waits: a waiter that dies leaves the line when its row expires.
CREATE TABLE {{.Qualified "_queue"}} (
	key        text COLLATE "C" NOT NULL,
	token      text COLLATE "C" NOT NULL,
	owner      text NOT NULL,
	seq        bigint GENERATED ALWAYS AS IDENTITY,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, token)
);
CREATE INDEX {{.Ident "_queue_seq"}} ON {{.Qualified "_queue"}} (key, seq);
