-- Read-write locks and semaphores (driver.Kinder), a namespace apart from
-- the lock table's mutexes, and the fair queue of mutex waiters
-- (driver.FairQueuer). Keys and tokens compare byte for byte; times are UTC
-- by the server's clock (UTC_TIMESTAMP(6)), never a client's.

-- One row per read-write lock or semaphore key ever used, never deleted:
-- the key's fence counter, which so outlives its entries, and the row every
-- acquire of the key locks first (SELECT ... FOR UPDATE), so that acquires
-- of one key take turns.
CREATE TABLE IF NOT EXISTS {{table_kinds}} (
  lock_key VARBINARY(512)  NOT NULL,
  fence    BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per entry of a key: a reader, a writer, a writer's claim to be
-- next, or a permit, each a lease of its own. mode is driver.Mode (1 read,
-- 2 write, 3 permit); lim is the semaphore's number of permits (0 for a
-- read-write lock); state is 0 for a hold, 1 for a writer waiting, 2 for a
-- hold released with a MinHold still to run (it counts until expires_at,
-- but its token renews and releases nothing more). Rows are deleted on
-- release, and once expired by the next acquire of the key.
CREATE TABLE IF NOT EXISTS {{table_holds}} (
  lock_key    VARBINARY(512)   NOT NULL,
  token       VARBINARY(128)   NOT NULL,
  mode        TINYINT UNSIGNED NOT NULL,
  state       TINYINT UNSIGNED NOT NULL,
  lim         INT              NOT NULL,
  owner       VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  fence       BIGINT UNSIGNED  NOT NULL,
  acquired_at DATETIME(6)      NOT NULL,
  expires_at  DATETIME(6)      NOT NULL,
  PRIMARY KEY (lock_key, token)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The fair queue: one row per waiter of a mutex key, in arrival order
-- (seq), each a lease its waiter renews while it waits. The head is the
-- live entry with the lowest seq of its key.
CREATE TABLE IF NOT EXISTS {{table_queue}} (
  seq        BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  lock_key   VARBINARY(512)  NOT NULL,
  token      VARBINARY(128)  NOT NULL,
  owner      VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  expires_at DATETIME(6)     NOT NULL,
  PRIMARY KEY (seq),
  KEY by_key (lock_key, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
