package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/internal/redact"
)

const validateUsage = `Usage: tasklock validate --config FILE

Checks the configuration file of "tasklock serve" without connecting to the
store: the YAML, every key (unknown keys are errors), every value, each
job's schedule, time zone and durations, and the store URL. It prints OK
with the number of jobs, or every mistake, one a line, each naming the
file, the line, the job and the key:

  config.yaml:7: job "nightly-report": timeout: invalid duration "10x"

A password in the store URL is never printed. See "tasklock help serve"
for the file's keys.

It also looks for each job's command, and each notify: command, on this
host, and for one it cannot find prints a warning on stderr, without failing (validate may run on
another host than serve, with another PATH):

  tasklock validate: warning: job "backup": command "pg_dump" not found in PATH on this host

Exit status: 0 when the file is valid (also with warnings), 64 when it is
not (or cannot be read, or the flags are wrong).
`

// configFlag parses the flags of validate and serve into the FlagSet's
// values and returns the --config path. It returns flag.ErrHelp for -h.
func configFlag(fs *flag.FlagSet, args []string) (string, error) {
	var path string
	fs.SetOutput(io.Discard)
	fs.StringVar(&path, "config", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", err
		}
		return "", flagError(fs, err)
	}
	if err := checkDurations(fs); err != nil {
		return "", err
	}
	switch {
	case fs.NArg() > 0:
		return "", usagef("unexpected argument %s", redact.Quote(fs.Arg(0)))
	case path == "":
		return "", usagef("--config FILE is required")
	}
	return path, nil
}

// runValidate is the validate command.
func runValidate(args []string, stdout, stderr io.Writer) int {
	path, err := configFlag(flag.NewFlagSet("validate", flag.ContinueOnError), args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, validateUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock validate: %v\nRun 'tasklock help validate' for usage.\n", err)
		return exitUsage
	}
	f, err := config.Load(path)
	if err != nil {
		printConfigErrors(stderr, "tasklock validate", err)
		return exitUsage
	}
	// What serve would use with this environment (serveUsage's order).
	store, node := redact.URL(f.Store), f.Node
	storeURL := f.Store
	if f.Node == "" {
		node = "host:pid"
	}
	if v := os.Getenv("TASKLOCK_STORE"); v != "" {
		store = redact.URL(v) + " (from $TASKLOCK_STORE)"
		storeURL = v
	}
	if f.PreferredNodes && !keepsClaimMarks(storeURL) {
		fmt.Fprintf(stderr, "tasklock validate: warning: %s\n", preferredNodesIgnored(storeURL))
	}
	if v := os.Getenv("TASKLOCK_NODE"); v != "" {
		node = redact.Printable(v) + " (from $TASKLOCK_NODE)"
	}
	if f.Notify != nil {
		if msg := commandMissing(f.Notify.Command); msg != "" {
			fmt.Fprintf(stderr, "tasklock validate: warning: notify: %s\n", msg)
		}
	}
	for _, j := range f.Jobs {
		if msg := commandMissing(j.Command); msg != "" {
			fmt.Fprintf(stderr, "tasklock validate: warning: job %s: %s\n", redact.Quote(j.Name), msg)
		}
		if j.Notify != nil {
			if msg := commandMissing(j.Notify.Command); msg != "" {
				fmt.Fprintf(stderr, "tasklock validate: warning: job %s: notify: %s\n", redact.Quote(j.Name), msg)
			}
		}
	}
	fmt.Fprintf(stdout, "%s: OK: %s, store %s, node %s\n", path, plural(len(f.Jobs), "job"), store, node)
	return exitOK
}

// keepsClaimMarks reports whether the store at url keeps the claim marks
// preferred_nodes needs (ledger.Marker): the Redis stores and mem://.
func keepsClaimMarks(url string) bool {
	scheme, _, _ := strings.Cut(url, "://")
	return strings.HasPrefix(scheme, "redis") || scheme == "mem"
}

// preferredNodesIgnored says that preferred_nodes: true does nothing on
// the store at url, which keeps no claim marks.
func preferredNodesIgnored(url string) string {
	scheme, _, _ := strings.Cut(url, "://")
	return fmt.Sprintf("preferred_nodes: true does nothing on a %s:// store, which keeps no claim marks (Redis and mem:// stores do): every node claims every tick, as by default", redact.Printable(scheme))
}

// commandMissing says why argv's program cannot be found on this host, or
// returns "" when it can (or argv is nil: an HTTP job). A name without a
// slash is looked for in $PATH, as serve does when it runs it; a path is
// looked at as it is, relative to the current directory when relative.
func commandMissing(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	_, err := exec.LookPath(argv[0])
	switch {
	case err == nil || errors.Is(err, exec.ErrDot):
		return ""
	case !strings.Contains(argv[0], "/"):
		return fmt.Sprintf("command %s not found in PATH on this host", redact.Quote(argv[0]))
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("command %s not found on this host", redact.Quote(argv[0]))
	}
	if inner := errors.Unwrap(err); inner != nil {
		err = inner // without exec's repetition of the name
	}
	return fmt.Sprintf("command %s cannot be run on this host: %s", redact.Quote(argv[0]), redact.Printable(err.Error()))
}

// printConfigErrors prints every mistake of a configuration file, or why
// it could not be read.
func printConfigErrors(w io.Writer, cmd string, err error) {
	var es config.Errors
	if !errors.As(err, &es) {
		fmt.Fprintf(w, "%s: %s\n", cmd, redact.Printable(err.Error())) // the path may hold a newline
		return
	}
	for _, l := range config.AsErrors(err) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "%s: %s in the configuration\n", cmd, plural(len(es), "mistake"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// maxDuration bounds every duration flag and configuration key: a year,
// tasklock.MaxTTL, the longest lease a lock may have.
const maxDuration = tasklock.MaxTTL

// checkDurations refuses a duration flag of fs above maxDuration, naming
// the flag and the bound: such a value is a mistake, and some stores
// reject it with an error of their own that names neither.
func checkDurations(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if d, ok := g.Get().(time.Duration); ok && d > maxDuration {
			err = usagef("--%s %v is above the maximum %v (365 days)", f.Name, d, maxDuration)
		}
	})
	return err
}
