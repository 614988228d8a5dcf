package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
)

// adminArgs are the arguments every locks and jobs subcommand takes.
type adminArgs struct {
	sub        string
	positional []string // after the subcommand
	store      string
	storeEnv   bool // the store came from $TASKLOCK_STORE
	json       bool
	timeout    time.Duration
}

// parseAdmin parses "SUB [ARGS] --store URL [--json] [--timeout D]" with
// flags anywhere; extra adds the subcommand's own flags. subs maps each
// subcommand to the names of its arguments as its usage gives them
// ("JOB TICK"; "[JOB]" for an optional one, last).
func parseAdmin(cmd string, args []string, getenv func(string) string, subs map[string]string, extra func(fs *flag.FlagSet)) (*adminArgs, error) {
	a := &adminArgs{}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.store, "store", "", "")
	fs.BoolVar(&a.json, "json", false, "")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "")
	if extra != nil {
		extra(fs)
	}
	positional, set, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, err
	}
	if !set["store"] {
		a.store, a.storeEnv = getenv("TASKLOCK_STORE"), true
	}
	if len(positional) == 0 {
		return nil, usagef("missing subcommand: %s", subNames(subs))
	}
	a.sub, a.positional = positional[0], positional[1:]
	spec, ok := subs[a.sub]
	names := strings.Fields(spec)
	want := 0 // the required arguments; the optional ones follow them
	for _, n := range names {
		if !strings.HasPrefix(n, "[") {
			want++
		}
	}
	switch {
	case !ok:
		return nil, usagef("unknown subcommand %s: want %s", redact.Quote(a.sub), subNames(subs))
	case len(a.positional) < want:
		return nil, usagef("%s: missing %s (tasklock %s %s %s)", a.sub, names[len(a.positional)], cmd, a.sub, spec)
	case len(a.positional) > len(names):
		return nil, usagef("%s: unexpected argument %s", a.sub, redact.Quote(a.positional[len(names)]))
	case a.store == "" && set["store"]:
		return nil, usagef("--store is empty")
	case a.store == "":
		return nil, usagef("--store is required (or set TASKLOCK_STORE)")
	case a.timeout <= 0:
		return nil, usagef("--timeout must be positive, got %v", a.timeout)
	}
	return a, nil
}

// parseInterleaved parses fs from args, allowing flags before, between
// and after positional arguments, which it returns in order, with the
// names of the flags given. It returns flag.ErrHelp for -h and a
// *usageError for a bad flag.
func parseInterleaved(fs *flag.FlagSet, args []string) (positional []string, set map[string]bool, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, flagError(fs, err)
		}
		if fs.NArg() == 0 {
			if err := checkDurations(fs); err != nil {
				return nil, nil, err
			}
			set = map[string]bool{}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
			return positional, set, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// subNames lists the subcommands of subs in the order of the usage texts.
func subNames(subs map[string]string) string {
	names := make([]string, 0, len(subs))
	for _, n := range []string{"list", "show", "release", "history", "trigger", "cancel", "pause", "resume", "forget", "backfill", "rerun",
		"create", "update", "delete", "audit", "notifications"} {
		if _, ok := subs[n]; ok {
			names = append(names, n)
		}
	}
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " or "
		default:
			s += ", "
		}
		s += n
	}
	return s
}

// adminRun parses, calls check (when set) with what needs no store, opens
// the store and calls fn; it maps usage errors to exit 64 and store
// failures to exit 69, and never prints a password. A usage error check
// finds is 64 whether the store answers or not, and comes before
// anything opens (or creates) the store.
func adminRun(cmd, usage string, args []string, stdout, stderr io.Writer, subs map[string]string,
	extra func(fs *flag.FlagSet), check func(a *adminArgs) error, fn func(ctx context.Context, a *adminArgs, store driver.Store) error) int {
	a, err := parseAdmin(cmd, args, os.Getenv, subs, extra)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock %s: %v\nRun 'tasklock help %s' for usage.\n", cmd, err, cmd)
		return exitUsage
	}
	if check != nil {
		if err := check(a); err != nil {
			return adminExit(cmd, a.sub, err, stderr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	// Only create makes a SQLite file that is not there: the other
	// subcommands read or change what a store already holds.
	store, closeFn, err := openStore(ctx, a.store, a.sub)
	if err != nil {
		fmt.Fprintf(stderr, "tasklock %s %s: %v\n", cmd, a.sub, fromEnv(timedOut(ctx, a.timeout, err), a.storeEnv))
		return openExit(err)
	}
	defer closeFn()
	return adminExit(cmd, a.sub, timedOut(ctx, a.timeout, fn(ctx, a, store)), stderr)
}

// timedOut adds to err, when ctx's --timeout d has passed, that the store
// gave no answer within it.
func timedOut(ctx context.Context, d time.Duration, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w (no answer within --timeout %v)", err, d)
	}
	return err
}

// adminExit prints err, if any, and returns the exit status it means.
func adminExit(cmd, sub string, err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "tasklock %s %s: %v\n", cmd, sub, err)
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitMissing
	default:
		return exitUnavailable
	}
}

// openStore opens the store of the locks and jobs commands for the
// subcommand sub: as storeurl.Open for create and storeurl.OpenExisting
// otherwise. It refuses mem:// to a subcommand that changes the store (all
// but readOnlySubs): that store is this process's memory, so the change
// would be reported done and be gone when the command ends, with no serve
// ever seeing it. The tests of commands on an in-process store replace it.
var openStore = func(ctx context.Context, rawURL, sub string) (driver.Store, func() error, error) {
	if !readOnlySubs[sub] && strings.HasPrefix(strings.ToLower(rawURL), "mem://") {
		return nil, nil, usagef("mem:// is this command's own memory, which no serve shares: %s would change it and the change would be gone when the command ends; give the store tasklock serve runs on (--store or $TASKLOCK_STORE)", sub)
	}
	if sub == "create" {
		return storeurl.Open(ctx, rawURL)
	}
	return storeurl.OpenExisting(ctx, rawURL)
}

// readOnlySubs are the subcommands of jobs and locks that only read the
// store.
var readOnlySubs = map[string]bool{"list": true, "history": true, "show": true, "audit": true, "notifications": true}

// fromEnv adds to err, a failure to open the store, that its URL came
// from $TASKLOCK_STORE when env is set: the user may not have thought of
// it, having given no --store (serve says the same).
func fromEnv(err error, env bool) error {
	if !env || err == nil {
		return err
	}
	return fmt.Errorf("%w (the store of $TASKLOCK_STORE)", err)
}

// openExit is the exit status when a store cannot be opened: 64 for a bad
// URL, 69 for a store that cannot be reached.
func openExit(err error) int {
	var ue *usageError
	if errors.Is(err, storeurl.ErrBadURL) || errors.As(err, &ue) {
		return exitUsage
	}
	return exitUnavailable
}

// errNotFound is wrapped by the errors of admin commands about a lock or
// job that does not exist: exit status 1.
var errNotFound = errors.New("not found")

// exitMissing is the exit status of locks show and release when the
// named lock is not held.
const exitMissing = 1

// writeJSON writes v as indented JSON to w.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
