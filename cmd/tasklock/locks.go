package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/redlock"
)

const locksUsage = `Usage:
  tasklock locks list    --store URL [--prefix P] [--json]
  tasklock locks show    --store URL KEY [--json]
  tasklock locks release --store URL KEY --force [--json]

Shows who holds which lock in a store, and releases one by force.

  list     every live lock whose key starts with --prefix (default: all),
           sorted by key: KEY, KIND, OWNER, FENCE, EXPIRES_IN (the lease
           left at the store if its holder stopped renewing now). KIND is
           mutex, read or write (a read-write lock: a row per holder, and
           "write (waiting)" for a writer that holds new readers off), or
           "permit (of N)" (a semaphore: a row per permit held)
  show     one lock; exit 1 when KEY is not held
           On a redlock:// store, list and show also warn on stderr of
           each node that does not answer: the locks work on with a
           majority and say nothing of it.
  release  delete KEY's lease whoever holds it (a mutex, and every holder
           of the read-write lock or semaphore KEY): the operator's escape hatch
           for a holder that is gone. --force is required. The holder, if
           alive, learns at its next renewal (its Done closes). Exit 1 when
           KEY is not held.

Flags (anywhere):
  --store URL    the store, as for exec; default $TASKLOCK_STORE
  --json         print JSON: list and show {"locks": [{"key", "owner",
                 "fence", "expires_in_ms", "kind", "permits", "waiting"}]};
                 release {"released": KEY}
  --timeout D    how long to wait for the store (default 30s)

Exit status: 0 done; 1 KEY not held; 64 bad usage or URL, or release on
mem:// (this command's own memory); 69 store unreachable or failing, or
the store cannot list or release locks.
`

var locksSubs = map[string]string{"list": "", "show": "KEY", "release": "KEY"}

// lockJSON is one lock in the JSON output of locks, shared with the
// dashboard's API.
type lockJSON = apijson.Lock

// runLocks is the locks command.
func runLocks(args []string, stdout, stderr io.Writer) int {
	var prefix string
	var force bool
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&prefix, "prefix", "", "")
		fs.BoolVar(&force, "force", false, "")
	}
	check := func(a *adminArgs) error {
		// No lock has an empty key (exec refuses one): a mistake, not
		// a key that is not held.
		if (a.sub == "show" || a.sub == "release") && len(a.positional) > 0 && a.positional[0] == "" {
			return usagef("KEY is empty")
		}
		if a.sub == "release" && !force {
			return usagef("release deletes another owner's lease: add --force")
		}
		return nil
	}
	return adminRun("locks", locksUsage, args, stdout, stderr, locksSubs, extra, check, func(ctx context.Context, a *adminArgs, store driver.Store) error {
		switch a.sub {
		case "release":
			fr, ok := store.(driver.ForceReleaser)
			if !ok {
				return fmt.Errorf("%s cannot release locks by force", redact.URL(a.store))
			}
			key := a.positional[0]
			if err := fr.ForceRelease(ctx, key); errors.Is(err, driver.ErrNotHeld) {
				return fmt.Errorf("%s is not held: %w", redact.Quote(key), errNotFound)
			} else if err != nil {
				return err
			}
			if a.json {
				return writeJSON(stdout, apijson.Released{Released: key})
			}
			fmt.Fprintf(stdout, "released %s\n", redact.Quote(key))
			return nil
		}
		ls, ok := store.(driver.Lister)
		if !ok {
			return fmt.Errorf("%s cannot list its locks", redact.URL(a.store))
		}
		p := prefix
		if a.sub == "show" {
			p = a.positional[0]
		}
		leases, err := ls.Leases(ctx, p)
		if err != nil {
			return err
		}
		if rs, ok := store.(*redlock.Store); ok {
			warnRedlockNodes(ctx, rs, a.store, stderr)
		}
		if a.sub == "show" {
			var exact []driver.Lease
			for _, l := range leases {
				if l.Key == p {
					exact = append(exact, l)
				}
			}
			if leases = exact; len(leases) == 0 {
				return fmt.Errorf("%s is not held: %w", redact.Quote(p), errNotFound)
			}
		}
		sort.Slice(leases, func(i, j int) bool { return leases[i].Key < leases[j].Key })
		if a.json {
			out := make([]lockJSON, len(leases))
			for i, l := range leases {
				out[i] = apijson.FromLease(l)
			}
			return writeJSON(stdout, map[string]any{"locks": out})
		}
		if len(leases) == 0 {
			fmt.Fprintln(stdout, "no locks held")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tKIND\tOWNER\tFENCE\tEXPIRES_IN")
		for _, l := range leases {
			// Names written before they were checked may hold control
			// characters: escaped, they can neither forge a row nor
			// reach the terminal raw.
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\n", redact.Printable(l.Key), apijson.FromLease(l).KindText(), redact.Printable(l.Owner), l.Fence, l.TTL.Round(time.Millisecond))
		}
		return tw.Flush()
	})
}

// warnRedlockNodes warns on stderr of each node of a RedLock store that
// does not answer PING within a second (redlockNodesDown).
func warnRedlockNodes(ctx context.Context, s *redlock.Store, storeURL string, stderr io.Writer) {
	for _, w := range redlockNodesDown(ctx, s, storeURL) {
		fmt.Fprintf(stderr, "tasklock locks: warning: %s\n", w)
	}
}
