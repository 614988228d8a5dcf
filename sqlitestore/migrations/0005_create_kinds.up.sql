-- Read-write locks and semaphores (driver.Kinder), in a namespace of their
-- own beside the lock table's mutexes, and the fair queues of mutex
-- waiters (driver.FairQueuer). Times are integer unix microseconds from
-- SQLite's clock.

-- One row per read-write lock or semaphore key ever granted: its fence
-- counter, never deleted, so that fences outlive the entries.
CREATE TABLE IF NOT EXISTS {{.Ident "_kinds"}} (
    "key" TEXT    NOT NULL PRIMARY KEY,
    fence INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per entry of a read-write lock or semaphore key: mode 1 a
-- reader, 2 a writer, 3 a permit; state 0 a hold, 1 a writer's waiting
-- claim, 2 a hold released with MinHold (kept until expires_at, and no
-- longer the token's to renew or release). lim is the semaphore's number
-- of permits (0 for a read-write lock). A row whose expires_at has passed
-- counts for nothing and is deleted by the next acquire of its key.
CREATE TABLE IF NOT EXISTS {{.Ident "_entries"}} (
    "key"      TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    mode       INTEGER NOT NULL,
    state      INTEGER NOT NULL,
    lim        INTEGER NOT NULL,
    owner      TEXT    NOT NULL,
    fence      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY ("key", token, mode)
) WITHOUT ROWID;

-- The fair queues: one row per waiting (key, token), a lease renewed by
-- its waiter; seq is the order of arrival (AUTOINCREMENT: never reused).
CREATE TABLE IF NOT EXISTS {{.Ident "_queue"}} (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    "key"      TEXT    NOT NULL,
    token      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    UNIQUE ("key", token)
);
-- A key's live queue in order, read without touching the table.
CREATE INDEX IF NOT EXISTS {{.Ident "_queue_order_idx"}} ON {{.Ident "_queue"}} ("key", seq, expires_at);
