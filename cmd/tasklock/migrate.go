package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/redact"
)

const migrateUsage = `Usage:
  tasklock migrate up     --store URL [--json] [--timeout D]
  tasklock migrate status --store URL [--json] [--timeout D]

Creates or upgrades the lock table of a SQL store (postgres://, mysql://,
sqlite://), or shows which migrations it has. The URL is exec's, with the
same table, schema and mode parameters; migrate= is ignored here.

  up       apply the pending migrations in order and print each one applied.
           Safe to run from several hosts at once, and to run again: a table
           that is up to date is left alone.
  status   print each migration's version, name, whether it is applied and
           when (the database's clock, UTC). It only reads: it never creates
           or changes anything.

Flags (before or after up/status):
  --store URL    the store; default $TASKLOCK_STORE (see "tasklock help")
  --json         print JSON instead of text
  --timeout D    how long to wait for the store, and for another host's
                 migration to finish (default 1m)

exec creates the table itself when it is missing (migrate=true is the
default in a store URL). Run "migrate up" ahead of time when the account
exec runs as may not create tables, and give exec's URL ?migrate=false:
exec then fails (exit 69) rather than run without the table.

Stores without a schema (mem://, redis://, etcd://, zk://, redlock://, ...)
have nothing to migrate: up and status say so and exit 0, without
connecting, so a deployment script can run "migrate up" whichever store it
is given.

JSON: {"store": URL (password hidden), "has_schema": bool, "table": NAME,
"migrations": [{"version", "name", "applied", "applied_at"}], and for up
"applied": [the migrations this run applied]}; applied_at is RFC 3339 in
UTC, or null while pending.

Exit status:
  0    done (status: also when migrations are pending)
  64   bad usage or store URL (the message names the flag or parameter;
       status: a SQLite file that does not exist)
  69   store unreachable, or the migration failed
`

// migrateConfig holds migrate's checked arguments.
type migrateConfig struct {
	sub      string // "up" or "status"
	store    string
	storeEnv bool // store came from $TASKLOCK_STORE
	json     bool
	timeout  time.Duration
}

// parseMigrate parses migrate's arguments: the subcommand, with flags
// before or after it. It returns flag.ErrHelp for -h, and a *usageError
// for every mistake.
func parseMigrate(args []string, getenv func(string) string) (*migrateConfig, error) {
	c := &migrateConfig{}
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.store, "store", "", "")
	fs.BoolVar(&c.json, "json", false, "")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "")
	positional, set, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if !set["store"] {
		c.store, c.storeEnv = getenv("TASKLOCK_STORE"), true
	}
	switch {
	case len(positional) == 0:
		return nil, usagef("missing subcommand: up or status")
	case positional[0] != "up" && positional[0] != "status":
		return nil, usagef("unknown subcommand %s: want up or status", redact.Quote(positional[0]))
	case len(positional) > 1:
		return nil, usagef("unexpected argument %s after %s", redact.Quote(positional[1]), positional[0])
	case c.store == "" && set["store"]:
		return nil, usagef("--store is empty")
	case c.store == "":
		return nil, usagef("--store is required (or set TASKLOCK_STORE)")
	case c.timeout <= 0:
		return nil, usagef("--timeout must be positive, got %v", c.timeout)
	}
	c.sub = positional[0]
	return c, nil
}

// migrationJSON is one migration in migrate's JSON output.
type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at"`
}

// migrateReport is migrate's JSON output.
type migrateReport struct {
	Store      string           `json:"store"`
	HasSchema  bool             `json:"has_schema"`
	Table      string           `json:"table,omitempty"`
	Migrations []migrationJSON  `json:"migrations"`
	Applied    *[]migrationJSON `json:"applied,omitempty"` // up only
}

func toJSON(ms []storeurl.Migration) []migrationJSON {
	out := make([]migrationJSON, 0, len(ms))
	for _, m := range ms {
		j := migrationJSON{Version: m.Version, Name: m.Name, Applied: m.Applied}
		if m.Applied {
			at := m.AppliedAt
			j.AppliedAt = &at
		}
		out = append(out, j)
	}
	return out
}

// runMigrate is the migrate command.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	c, err := parseMigrate(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, migrateUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock migrate: %v\nRun 'tasklock help migrate' for usage.\n", err)
		return exitUsage
	}
	failf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "tasklock migrate %s: "+format+"\n", append([]any{c.sub}, args...)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	storeName := redact.URL(c.store)
	report := migrateReport{Store: storeName, Migrations: []migrationJSON{}}

	m, err := storeurl.OpenMigrator(ctx, c.store)
	if !errors.Is(err, storeurl.ErrNoMigrations) {
		err = fromEnv(err, c.storeEnv)
	}
	switch {
	case errors.Is(err, storeurl.ErrNoMigrations):
		if c.sub == "up" {
			report.Applied = &[]migrationJSON{}
		}
		if c.json {
			return printJSON(stdout, stderr, report)
		}
		fmt.Fprintf(stdout, "%s keeps no schema: nothing to migrate\n", storeName)
		return exitOK
	case errors.Is(err, storeurl.ErrBadURL):
		failf("%v", err)
		return exitUsage
	case err != nil:
		failf("%v", timedOut(ctx, c.timeout, err))
		return exitUnavailable
	}
	defer func() {
		if err := m.Close(); err != nil {
			failf("closing the store connection: %v", err)
		}
	}()
	report.HasSchema, report.Table = true, m.Table()

	var applied []storeurl.Migration
	if c.sub == "up" {
		if applied, err = m.Up(ctx); err != nil {
			failf("%v", timedOut(ctx, c.timeout, err))
			return exitUnavailable
		}
		a := toJSON(applied)
		report.Applied = &a
	}
	states, err := m.Status(ctx)
	switch {
	case errors.Is(err, storeurl.ErrBadURL):
		failf("%v", err)
		return exitUsage
	case err != nil:
		failf("%v", timedOut(ctx, c.timeout, err))
		return exitUnavailable
	}
	report.Migrations = toJSON(states)
	if c.json {
		return printJSON(stdout, stderr, report)
	}

	if c.sub == "up" {
		for _, a := range applied {
			fmt.Fprintf(stdout, "applied %s to %s (%s)\n", a, m.Table(), storeName)
		}
		if len(applied) == 0 {
			fmt.Fprintf(stdout, "%s (%s) is up to date: nothing to apply\n", m.Table(), storeName)
		}
		return exitOK
	}
	fmt.Fprintf(stdout, "%s (%s)\n", m.Table(), storeName)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED\tAPPLIED_AT")
	pending := 0
	for _, s := range states {
		name, applied, at := s.Name, "yes", s.AppliedAt.Format(time.RFC3339)
		if name == "" {
			name = "(unknown: applied by a newer tasklock)"
		}
		if !s.Applied {
			applied, at = "no", "-"
			pending++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, name, applied, at)
	}
	tw.Flush()
	if pending > 0 {
		fmt.Fprintf(stdout, "%d pending: run 'tasklock migrate up'\n", pending)
	}
	return exitOK
}

// printJSON writes v as indented JSON.
func printJSON(stdout, stderr io.Writer, v any) int {
	if err := writeJSON(stdout, v); err != nil {
		fmt.Fprintf(stderr, "tasklock migrate: %v\n", err)
		return exitSoftware
	}
	return exitOK
}
