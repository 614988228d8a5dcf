-- waiters is set by an acquire that finds the key held (in the same upsert
-- that would have granted it) and cleared by the next grant. A release
-- NOTIFYs the channel only when it is set: a NOTIFY takes a database-wide
-- lock at commit, which would serialise every release of every key.
-- ADD COLUMN with a constant default rewrites nothing (PostgreSQL 11+).
ALTER TABLE {{.Table}} ADD COLUMN waiters boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN {{.Table}}.waiters IS 'tasklock: an acquire found the key held since it was last granted; the release then NOTIFYs';
