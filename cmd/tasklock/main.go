// Command tasklock runs work that many hosts could run once at a time, under
// a distributed lock kept in a store the hosts share.
//
//	tasklock exec --store redis://cache:6379 --key nightly-report -- ./report.sh
//	tasklock exec --store postgres://app@db/app --key nightly-report -- ./report.sh
//	tasklock migrate status --store postgres://app@db/app
//	tasklock validate --config tasklock.yaml
//	tasklock serve --config tasklock.yaml
//	tasklock demo
//
// Run "tasklock help" for the commands, store URLs and exit statuses, and
// "tasklock help exec" for exec's flags and its handling of lock loss and
// signals.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/buildinfo"
	"github.com/tasklock/tasklock/internal/redact"
)

// Exit statuses, from BSD sysexits.h where one fits.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE: bad flags or arguments
	exitUnavailable = 69  // EX_UNAVAILABLE: the store cannot be reached or fails
	exitSoftware    = 70  // EX_SOFTWARE: the lock was lost or MaxHold reached while COMMAND ran
	exitTempFail    = 75  // EX_TEMPFAIL: the lock is held elsewhere; try again later
	exitCannotRun   = 126 // COMMAND exists but could not be run (as in sh)
	exitNotFound    = 127 // COMMAND was not found (as in sh)
)

const usage = `tasklock runs work that many hosts could run, one at a time, under a
distributed lock kept in a store they share.

Usage:
  tasklock exec --store URL --key NAME [flags] -- COMMAND [ARGS...]
  tasklock migrate up|status --store URL [--json]
  tasklock serve --config FILE [--store URL] [--node NAME] [--grace D] [--verbose]
  tasklock validate --config FILE
  tasklock jobs list|history|trigger|cancel|pause|resume|forget|backfill|rerun|
                create|update|delete|audit|notifications --store URL [--json]
  tasklock locks list|show|release --store URL [--json]
  tasklock demo [--duration D] [--nodes N] [--jobs N] [--keep] | --lock
  tasklock health [--http ADDR] [--ready] [--timeout D]
  tasklock version [--json]      (also tasklock --version)
  tasklock help [COMMAND]

Commands:
  exec     run COMMAND while holding the lock NAME; see "tasklock help exec"
  migrate  create or upgrade the lock table of a SQL store, or show its
           migrations; see "tasklock help migrate"
  serve    run the periodic jobs of a configuration file, each tick once
           across every host that serves it; see "tasklock help serve"
  validate check a configuration file for serve, printing every mistake
  jobs     list jobs, show run history, trigger, pause or resume a job in
           a store's ledger; see "tasklock help jobs"
  locks    list who holds which lock, or release one by force; see
           "tasklock help locks"
  demo     watch a cluster of serve processes on a temporary SQLite store
           run jobs every second, each tick once, while a node is killed
           and restarted (nothing to install); --lock: workers taking turns
           on one lock in this process
  health   ask a running serve's dashboard /healthz, or /readyz with
           --ready: for container health checks; see "tasklock help health"
  version  print the module version, the VCS revision and time this
           binary was built from, and the Go version
  help     show this text, or a command's

Store URLs (--store, or $TASKLOCK_STORE):
  mem://                                      in-process, for trying things out (jobs
                                              and locks refuse to change it: no serve
                                              shares it)
  redis://[user:pass@]host:port[/db]          one Redis node
  rediss://[user:pass@]host:port[/db]         one Redis node over TLS
  redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER[?db=N]
  redis+cluster://[user:pass@]h1:p1,h2:p2
  postgres://[user:pass@]host[:port]/DB       PostgreSQL (also postgresql://)
  mysql://[user:pass@]host[:port]/DB          MySQL or MariaDB
  mysql://[user:pass@]tcp(host:port)/DB       the same, in go-sql-driver's form
  sqlite:///abs/path/file.db                  a SQLite file on this host
  sqlite://./relative/file.db                 relative to the working directory
  etcd://[user:pass@]h1:p1,h2:p2[/PREFIX]     an etcd cluster (keys under /PREFIX/)
  etcds://[user:pass@]h1:p1,h2:p2[/PREFIX]    the same over TLS
  zk://h1:p1,h2:p2[/ROOT]                     a ZooKeeper ensemble (nodes under /ROOT)
  redlock://[user:pass@]h1:p1,h2:p2,h3:p3[/db]
                                              RedLock over independent Redis servers
                                              (an odd number, at least 3)
Percent-encode reserved characters in the user and password (@ as %40).
Redis query parameters: prefix, dial_timeout, read_timeout, write_timeout,
pool_size, wait_replicas, wait_timeout; rediss:// also tls_ca_file,
redis+sentinel:// also db, sentinel_username, sentinel_password.
etcd query parameters: session_ttl (whole seconds, default 11s: no --ttl may
exceed it; a holder that dies is replaced within it), dial_timeout (default
5s); etcds:// also tls_ca_file, tls_cert_file, tls_key_file.
zk query parameters: session_timeout (default 10s: no --ttl may exceed the
session timeout the server grants).
redlock query parameters: prefix, node_timeout, dial_timeout, read_timeout,
write_timeout; the user and password apply to every server.
SQL query parameters: table=NAME, migrate=true|false, and for postgres and
mysql mode=lease|connection (connection: a lock also holds a connection,
and is freed the moment that connection ends); postgres also schema=NAME
and pgx's parameters (sslmode, connect_timeout, application_name, ...),
mysql go-sql-driver's (tls, timeout, readTimeout, charset, ...).
The SQL stores keep locks in a table. exec creates it when it is missing
(migrate=true is the default); with ?migrate=false exec fails instead (exit
69), for accounts that may not create tables: run "tasklock migrate up"
first. "tasklock migrate status" only reads, whatever the URL says. The
jobs and locks commands (but jobs create) do not create a SQLite file:
one that is not there is a bad URL (exit 64), most likely a mistyped path;
nor do they create or upgrade the table, whatever migrate= says: one that
lacks it, or lacks migrations, fails (exit 69) until "migrate up" has run.

Durations (--ttl, --wait, --timeout, ...) are Go durations such as 300ms,
10s or 1h30m, at most 8760h (365 days). Names (--owner, --node) must not
hold control characters.

Exit status of exec:
  64   bad usage (the message names the flag), a malformed store URL
       (found without connecting) or one its servers show wrong (a
       Sentinel master name no sentinel knows, a sentinel address that is
       a Redis server's, two redlock:// hosts that are one server), or a
       --ttl longer than an etcd or ZooKeeper store's session
  69   store unreachable, failing or refusing the URL's credentials
  70   lock lost or --max-hold reached while COMMAND ran (COMMAND was stopped)
  75   lock held elsewhere and not obtained within --wait
  126  COMMAND could not be run; 127 COMMAND not found
  else COMMAND's own exit status, or 128+N when signal N killed it
migrate exits 0, 64 or 69 alike; see "tasklock help migrate".
validate exits 0, or 64 for an invalid file; serve exits 0 after SIGTERM or
SIGINT; see "tasklock help serve".
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the tasklock command line args and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	quietClientLogs()
	switch cmd, rest := args[0], args[1:]; cmd {
	case "exec":
		return runExec(rest, stdin, stdout, stderr)
	case "migrate":
		return runMigrate(rest, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "locks":
		return runLocks(rest, stdout, stderr)
	case "jobs":
		return runJobs(rest, stdout, stderr)
	case "serve":
		return runServe(rest, stdout, stderr)
	case "validate":
		return runValidate(rest, stdout, stderr)
	case "health":
		return runHealth(rest, stdout, stderr)
	case superviseCmd:
		return runSupervise(rest, stderr)
	case "version", "-version", "--version":
		return runVersion(cmd, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		var text string
		switch rest[0] {
		case "exec":
			text = execUsage
		case "migrate":
			text = migrateUsage
		case "demo":
			text = demoUsage
		case "locks":
			text = locksUsage
		case "jobs":
			text = jobsUsage
		case "serve":
			text = serveUsage
		case "validate":
			text = validateUsage
		case "health":
			text = healthUsage
		case "version":
			text = versionUsage
		case "help":
			text = usage
		default:
			fmt.Fprintf(stderr, "tasklock help: unknown command %s\n", redact.Quote(rest[0]))
			return exitUsage
		}
		if len(rest) > 1 {
			// "help jobs history" would otherwise print the jobs text as
			// if history had been understood.
			fmt.Fprintf(stderr, "tasklock help: unexpected argument %s: help takes one COMMAND\nRun 'tasklock help' for usage.\n", redact.Quote(rest[1]))
			return exitUsage
		}
		fmt.Fprint(stdout, text)
		return exitOK
	default:
		fmt.Fprintf(stderr, "tasklock: unknown command %s; commands: exec, migrate, serve, validate, jobs, locks, demo, health, version, help\n", redact.Quote(cmd))
		return exitUsage
	}
}

// quietClientLogs drops the lines go-redis and go-sql-driver/mysql print
// on their own, by default to stderr ("sentinel: selected addr=...", a
// connection retried): a command prints its output and its own errors
// only. They are informational; exec shows them with --verbose and serve
// logs them, each through its own logger set over this one.
func quietClientLogs() {
	discard := slog.New(slog.DiscardHandler)
	redis.SetLogger(redisLogger{discard})
	_ = mysql.SetLogger(mysqlLogger{discard})
}

// superviseCmd is the hidden command that exec and serve run each COMMAND
// under on Linux (supervise_linux.go).
const superviseCmd = "__supervise"

const versionUsage = `Usage: tasklock version [--json]
       tasklock --version

Prints the build: the module version (a tag such as v1.2.3 for
"go install ...@v1.2.3", a pseudo-version for a build in a checkout), the
VCS revision and commit time it was built from when the go command
recorded them, and the Go version. --json prints
{"version", "revision", "time", "modified", "go_version"}.
`

// runVersion is the version command and the --version flag.
func runVersion(cmd string, args []string, stdout, stderr io.Writer) int {
	asJSON := false
	for _, arg := range args {
		switch {
		case cmd == "version" && (arg == "--json" || arg == "-json"):
			asJSON = true
		case len(args) == 1 && (arg == "-h" || arg == "--help" || arg == "-help"):
			fmt.Fprint(stdout, versionUsage)
			return exitOK
		default: // the argument that is wrong, not the first
			fmt.Fprintf(stderr, "tasklock version: unexpected argument %s\nRun 'tasklock help version' for usage.\n", redact.Quote(arg))
			return exitUsage
		}
	}
	in := buildinfo.Get()
	if asJSON {
		_ = writeJSON(stdout, in)
		return exitOK
	}
	fmt.Fprintln(stdout, in)
	return exitOK
}

// usageError is a mistake on the command line; its message names the flag.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// flagError turns an error of the flag package, from parsing fs, into a
// usageError that names the flag as the help does (--ttl) and, where the
// flag package says only "parse error", what the flag wants. Its message
// may quote a flag's value: hide anything that looks like a URL's password.
func flagError(fs *flag.FlagSet, err error) error {
	msg := strings.TrimSpace(err.Error())
	if m := flagValueError.FindStringSubmatch(msg); m != nil {
		value, name, reason := m[1], m[2], m[3]
		if reason == "parse error" {
			reason = "want " + flagWants(fs.Lookup(name))
		}
		msg = "--" + name + " " + value + ": " + reason
	} else if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag --" + name
	} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = "--" + name + " needs a value"
	}
	return &usageError{redact.Text(msg)}
}

// flagValueError is the flag package's message for a value it refused.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)

// flagWants says what values f takes, for a value the flag package could
// not parse.
func flagWants(f *flag.Flag) string {
	if f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				return "a duration such as 300ms, 10s or 1h30m (a number needs its unit)"
			case bool:
				return "true or false"
			case int, int64, uint, uint64:
				return "a whole number"
			case float64:
				return "a number"
			}
		}
	}
	return "another value"
}
