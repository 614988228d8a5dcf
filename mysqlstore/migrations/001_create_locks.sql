-- One row per lock key, never deleted, so that the fence counter survives
-- releases, expiries and restarts. The key is compared byte for byte
-- (VARBINARY), so "Job" and "job" are different locks whatever the server's
-- collations; 512 bytes keep the primary key well within InnoDB's index
-- limit. token is '' when nobody holds the key. Times are UTC, set from the
-- server's clock (UTC_TIMESTAMP(6)), never from a client's.
CREATE TABLE IF NOT EXISTS {{table}} (
  lock_key    VARBINARY(512)  NOT NULL,
  token       VARBINARY(128)  NOT NULL DEFAULT '',
  owner       VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  fence       BIGINT UNSIGNED NOT NULL,
  acquired_at DATETIME(6)     NOT NULL,
  expires_at  DATETIME(6)     NOT NULL,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
