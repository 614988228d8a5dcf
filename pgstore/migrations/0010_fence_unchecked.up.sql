-- Drops the lease table's CHECK (fence > 0). PostgreSQL reads a CHECK
-- constraint's stored text and plans it again at every INSERT and UPDATE of
-- the table, which cost about 30,000 server instructions per grant and
-- release, more than an eighth of the pair. The guarantee stays with the
-- statements, the only writers of the column: a new row's fence is 1 and a
-- grant sets the row's fence + 1 or keeps it, and bigint arithmetic that
-- overflows is an error, never a wrap-around. Found by its definition, not
-- its name (PostgreSQL truncates generated names of long tables). Dropping
-- a constraint rewrites and scans nothing. A Store of an older library
-- works on the table before and after this migration.
DO $$
DECLARE
	c name;
BEGIN
	FOR c IN
		SELECT conname FROM pg_constraint
		WHERE conrelid = '{{.Table}}'::regclass AND contype = 'c'
		  AND pg_get_constraintdef(oid) = 'CHECK ((fence > 0))'
	LOOP
		EXECUTE format('ALTER TABLE {{.Table}} DROP CONSTRAINT %I', c);
	END LOOP;
END
$$;
