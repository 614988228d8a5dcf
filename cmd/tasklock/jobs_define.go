package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
)

// defineFlags are the flags of jobs create and update: a snippet file and
// the keys a flag may set, each mapped to its configuration key (dotted
// for a nested key: http.url).
type defineFlags struct {
	file    string
	config  string       // --config: refuse the jobs this serve configuration names
	cfgFile *config.File // --config's file, loaded by change
	cancel  bool         // delete --cancel
	keys    map[string]*string
	keysSet map[string]bool
}

// defineKeys are the job keys jobs create and update take as flags, by
// flag name; the others need -f.
var defineKeys = []struct{ flag, key string }{
	{"schedule", "schedule"}, {"timezone", "timezone"}, {"command", "command"}, {"http-url", "http.url"},
	{"run-timeout", "timeout"}, {"overlap", "overlap"}, {"misfire", "misfire"}, {"retries", "retries"},
	{"jitter", "jitter"}, {"lock-ttl", "lock_ttl"}, {"kill-grace", "kill_grace"}, {"max-hold", "max_hold"},
	{"min-hold", "min_hold"}, {"run-on", "run_on"},
}

// defineFlagNames are the names of the flags of jobs create and update:
// -f, --config, --force and the job keys.
func defineFlagNames() []string {
	names := []string{"f", "config", "force"}
	for _, k := range defineKeys {
		names = append(names, k.flag)
	}
	return names
}

// snippetFlag reports whether name is -f or the flag of a job key: the
// flags that give create and update the job's definition.
func snippetFlag(name string) bool {
	return name == "f" || slices.ContainsFunc(defineKeys, func(k struct{ flag, key string }) bool { return k.flag == name })
}

func (d *defineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.file, "f", "", "")
	fs.StringVar(&d.config, "config", "", "")
	fs.BoolVar(&d.cancel, "cancel", false, "")
	d.keys, d.keysSet = map[string]*string{}, map[string]bool{}
	for _, k := range defineKeys {
		v := new(string)
		d.keys[k.flag] = v
		if f := fs.Lookup(k.flag); f != nil {
			// Another subcommand's flag of the same name and meaning
			// (backfill's --overlap): noted when given.
			f.Value = &sharedFlag{Value: f.Value, set: func(s string) { *v, d.keysSet[k.flag] = s, true }}
			continue
		}
		fs.Func(k.flag, "", func(s string) error { *v, d.keysSet[k.flag] = s, true; return nil })
	}
}

// sharedFlag is a flag another subcommand registered, also read by create
// and update when given.
type sharedFlag struct {
	flag.Value
	set func(string)
}

// Set implements flag.Value.
func (f *sharedFlag) Set(s string) error {
	if err := f.Value.Set(s); err != nil {
		return err
	}
	f.set(s)
	return nil
}

// snippet builds the job's definition from -f (a YAML or JSON mapping,
// "-" for stdin) and the key flags, which replace the keys they name;
// base, when set, is the stored definition that update changes.
func (d *defineFlags) snippet(base string, stdin io.Reader) ([]byte, string, error) {
	m := map[string]any{}
	source := "flags"
	switch {
	case d.file != "":
		// At most one byte past the limit, for config.Define to refuse:
		// the file may be endless (-f /dev/zero).
		var in io.Reader = stdin
		source = "stdin"
		if d.file != "-" {
			f, err := os.Open(d.file)
			if err != nil {
				return nil, "", usagef("-f: %v", err)
			}
			defer f.Close()
			in, source = f, d.file
		}
		data, err := io.ReadAll(io.LimitReader(in, config.MaxSnippet+1))
		if err != nil {
			return nil, "", usagef("-f: %v", err)
		}
		if len(d.keysSet) == 0 {
			return data, source, nil
		}
		// Checked alone first, so that its own mistakes name its lines;
		// keys it lacks may come from the flags and JOB, and are looked
		// for once they are added (define).
		if _, _, err := config.Define(source, data, ""); err != nil {
			if err := withoutMissing(err); err != nil {
				return nil, "", snippetError{err: err}
			}
		}
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, "", usagef("-f %s: %v", source, err)
		}
	case base != "":
		if err := json.Unmarshal([]byte(base), &m); err != nil {
			return nil, "", fmt.Errorf("the stored definition: %w", err)
		}
	}
	for _, k := range defineKeys {
		if !d.keysSet[k.flag] {
			continue
		}
		v := *d.keys[k.flag]
		source = "flags"
		switch k.key {
		case "command":
			// Split at blanks, as the help says: a quote or backslash
			// would be kept in an argument, not interpreted, so that
			// 'sh -c "echo a b"' would run sh with the arguments -c,
			// "echo, a and b".
			if strings.ContainsAny(v, "\"'\\") {
				return nil, "", usagef("--command %s: quotes and backslashes are not interpreted (the value is split at blanks): give arguments with blanks in -f FILE, as command: [sh, -c, \"echo a b\"]", redact.Quote(v))
			}
			m[k.key] = strings.Fields(v)
		case "http.url":
			m["http"] = map[string]any{"url": v}
		case "retries":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, "", usagef("--retries: want a whole number, got %s", redact.Quote(v))
			}
			m[k.key] = n
		default:
			m[k.key] = v
		}
		if v == "" {
			top, _, _ := strings.Cut(k.key, ".")
			delete(m, top)
		}
	}
	data, err := json.Marshal(m)
	return data, source, err
}

// isMissing reports whether a definition's mistake, msg, is a key it
// lacks (config says "missing…").
func isMissing(msg string) bool { return strings.HasPrefix(msg, "missing") }

// withoutMissing is err, a definition's mistakes, without those that say
// a key is missing; nil when none is left.
func withoutMissing(err error) error {
	var es config.Errors
	if !errors.As(err, &es) {
		return err
	}
	var rest config.Errors
	for _, e := range es {
		if !isMissing(e.Msg) {
			rest = append(rest, e)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return rest
}

// snippetError is a definition with mistakes: exit 64, every mistake
// printed. flagOf, when set, names the flag that gave a key its value, so
// that a mistake in it is reported under the flag the user typed
// (--run-timeout), not the configuration key it sets (timeout).
//
// merged says the definition checked was built from the flags (and -f's
// keys, file being -f's argument): its lines are no lines the user wrote,
// so a mistake no flag gave is told by its key alone, and a missing key
// with where to give it (-f's file, or the flag) — never as
// "flags:1: schedule: missing". A missing name, merged or not, says to
// give it as JOB or as name: in -f's file.
type snippetError struct {
	err    error
	flagOf func(field string) string
	merged bool
	file   string
}

func (e snippetError) Error() string {
	var es config.Errors
	if e.flagOf == nil || !errors.As(e.err, &es) {
		return "invalid job definition:\n  " + strings.Join(config.AsErrors(e.err), "\n  ")
	}
	lines := make([]string, len(es))
	for i, ce := range es {
		lines[i] = ce.Error()
		switch f := e.flagOf(ce.Field); {
		case f != "":
			lines[i] = f + ": " + ce.Msg
		case ce.Field == "name" && isMissing(ce.Msg):
			lines[i] = "the job has no name: give it as the JOB argument"
			if e.file != "" {
				lines[i] += " or as name: in " + e.fileName()
			}
		case e.merged && ce.Field != "":
			lines[i] = ce.Field + ": " + ce.Msg
			if isMissing(ce.Msg) {
				lines[i] += " (" + e.whereToGive(ce.Field) + ")"
			}
		}
	}
	return "invalid job definition:\n  " + strings.Join(lines, "\n  ")
}

// fileName is how a message names -f's file: "the snippet on stdin" for -.
func (e snippetError) fileName() string {
	if e.file == "-" {
		return "the snippet on stdin"
	}
	return e.file
}

// whereToGive says where a missing key can be given: in -f's file, and
// with the flag that sets it, if any.
func (e snippetError) whereToGive(field string) string {
	var ways []string
	if e.file != "" {
		ways = append(ways, "in "+e.fileName())
	}
	top, _, _ := strings.Cut(field, ".")
	for _, k := range defineKeys {
		if key, _, _ := strings.Cut(k.key, "."); key == top {
			ways = append(ways, "with --"+k.flag)
		}
	}
	if len(ways) == 0 {
		return "give it in -f FILE"
	}
	return "give it " + strings.Join(ways, " or ")
}

// flagOf returns "--flag" when field (a configuration key, dotted for a
// nested one: "http.url") got its value from a flag given to this command,
// and "" otherwise. A nested field under a flag's key other than the one
// the flag sets is named after the flag: "--misfire (grace)".
func (d *defineFlags) flagOf(field string) string {
	top, sub, _ := strings.Cut(field, ".")
	for _, k := range defineKeys {
		if !d.keysSet[k.flag] {
			continue
		}
		key, keySub, _ := strings.Cut(k.key, ".")
		if key != top {
			continue
		}
		if sub == "" || sub == keySub {
			return "--" + k.flag
		}
		return "--" + k.flag + " (" + sub + ")"
	}
	return ""
}

// As makes it a *usageError for the exit status.
func (e snippetError) As(target any) bool {
	if u, ok := target.(**usageError); ok {
		*u = &usageError{msg: e.Error()}
		return true
	}
	return false
}

// refusedError is a change the catalog or the configuration refuses:
// exit 1.
type refusedError string

func (e refusedError) Error() string        { return string(e) }
func (e refusedError) Is(target error) bool { return target == errNotFound }

// cliActor is the audit's Who for a change made by this command:
// "cli:user@host".
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return "cli:" + name + "@" + host
}

// change checks the arguments of jobs create, update (sub) and delete
// and builds the change, before the store is opened: only update without
// -f needs the stored definition, and leaves Def empty for jobsDefine.
// checkOwnFlags has refused the flags of the other subcommands.
func (d *defineFlags) change(sub, name string, stdin io.Reader) (jobdefs.Change, error) {
	c := jobdefs.Change{Op: jobdefs.Op(sub), Job: name, Cancel: d.cancel, Who: cliActor()}
	if sub == "delete" {
		if name == "" {
			return c, usagef("missing argument: the job's name")
		}
		if d.file != "" || len(d.keysSet) > 0 {
			return c, usagef("delete takes no -f and no job keys (--schedule, --command, ...)")
		}
		return c, nil
	}
	if d.config != "" {
		f, err := config.Load(d.config)
		if err != nil {
			return c, usagef("--config %s: %v", d.config, err)
		}
		d.cfgFile = f
	}
	if d.file == "" && len(d.keysSet) == 0 {
		return c, usagef("give the job as -f FILE (YAML or JSON; - for stdin) or flags (--schedule, --command, ...)")
	}
	if sub == "create" && d.file == "" && name == "" {
		return c, usagef("missing argument: the job's name (or a -f snippet with name:)")
	}
	if sub == "update" && d.file == "" {
		if name == "" {
			return c, usagef("missing argument: the job's name")
		}
		return c, nil
	}
	return c, d.define(&c, "", stdin)
}

// define sets c's Job and Def from the snippet on base (see snippet).
func (d *defineFlags) define(c *jobdefs.Change, base string, stdin io.Reader) error {
	data, source, err := d.snippet(base, stdin)
	if err != nil {
		return err
	}
	j, def, err := config.Define(source, data, c.Job)
	if err != nil {
		return snippetError{err: err, flagOf: d.flagOf, merged: source == "flags", file: d.file}
	}
	c.Job, c.Def = j.Name, def
	return nil
}

// jobsDefine is jobs create, update and delete, making the change c
// (defineFlags.change's).
func jobsDefine(ctx context.Context, a *adminArgs, l ledger.Ledger, d *defineFlags, c jobdefs.Change, force bool, stdout io.Writer) error {
	cat, ok := l.(ledger.Catalog)
	if !ok {
		return fmt.Errorf("%s keeps no catalog of jobs defined at run time", redact.URL(a.store))
	}
	if c.Op == jobdefs.Update && c.Def == "" { // the flags change the stored definition
		base := ""
		defs, err := cat.JobDefs(ctx)
		if err != nil {
			return err
		}
		for _, def := range defs {
			if def.Job == c.Job {
				base = def.Def
			}
		}
		if base == "" {
			// A job of serve's file is changed there, and create refuses it
			// too: say so, as delete does, rather than send the user to create.
			err := checkNotFileJob(ctx, cat, l, c.Job, d.config, d.cfgFile)
			var refused refusedError
			switch {
			case errors.As(err, &refused):
				return notDefinedError(c.Job)
			case err != nil:
				return err
			}
			return refusedError(fmt.Sprintf("no job named %q was defined at run time: use create", c.Job))
		}
		if err := d.define(&c, base, nil); err != nil { // without -f: no stdin
			return err
		}
	}
	if c.Op != jobdefs.Delete && !force {
		if err := checkNotFileJob(ctx, cat, l, c.Job, d.config, d.cfgFile); err != nil {
			return err
		}
	}
	if c.Op != jobdefs.Delete {
		if err := checkSharedLock(ctx, cat, c, d.config, d.cfgFile); err != nil {
			return err
		}
	}
	res, err := jobdefs.Apply(ctx, cat, c)
	switch {
	case errors.Is(err, jobdefs.ErrExists):
		return refusedError(fmt.Sprintf("job %q is defined already: use update", c.Job))
	case errors.Is(err, jobdefs.ErrNotDefined):
		return notDefinedError(c.Job)
	case errors.Is(err, jobdefs.ErrChanged):
		return refusedError(fmt.Sprintf("job %q was changed by someone else meanwhile: look at it again and retry", c.Job))
	case err != nil:
		return err
	}
	if a.json {
		return writeJSON(stdout, res.Answer(c))
	}
	switch {
	case !res.Changed:
		fmt.Fprintf(stdout, "%s is unchanged (version %d)\n", redact.Quote(c.Job), res.Def.Version)
	case c.Op == jobdefs.Delete:
		fmt.Fprintf(stdout, "deleted %s (version %d); its %s\n", redact.Quote(c.Job), res.Def.Version, apijson.DeleteDetail(c.Cancel))
	default:
		fmt.Fprintf(stdout, "%sd %s (version %d); every running serve node applies it within a second\n", c.Op, redact.Quote(c.Job), res.Def.Version)
	}
	return nil
}

// notDefinedError is the refusal of an update or delete of a job that was
// not defined at run time, such as a job of the configuration file.
func notDefinedError(job string) error {
	return refusedError(fmt.Sprintf("no job named %q was defined at run time (a job of the configuration file is changed there)", job))
}

// checkNotFileJob refuses a job a configuration file of tasklock serve
// names: the file is authoritative for its jobs. With --config it looks in
// f, that file as change loaded it; otherwise it refuses a job a node of serve registered that
// was never defined at run time (created, by the audit).
func checkNotFileJob(ctx context.Context, cat ledger.Catalog, l ledger.Ledger, job, configPath string, f *config.File) error {
	if f != nil {
		for _, j := range f.Jobs {
			if j.Name == job {
				return refusedError(fmt.Sprintf("job %q is in the configuration file %s, which is authoritative for its jobs: change it there", job, configPath))
			}
		}
		return nil
	}
	sts, err := l.Jobs(ctx)
	if err != nil {
		return err
	}
	registered := false
	for _, st := range sts {
		registered = registered || (st.Job == job && st.Spec != "")
	}
	if !registered {
		return nil
	}
	es, err := cat.Audit(ctx, ledger.AuditQuery{Job: job})
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Action == string(jobdefs.Create) {
			return nil
		}
	}
	return refusedError(fmt.Sprintf("job %q runs from the configuration file of tasklock serve, which is authoritative for its jobs: change it there (--config FILE checks against a file instead; --force goes on)", job))
}

// checkSharedLock refuses a job whose runs would take a lock another job
// takes (config.SharedLock): a job named "x/shard/2" beside a sharded job
// x, or the other way round. The two would skip each other's ticks as
// "the previous run is still in progress". It checks against the other
// jobs defined at run time, which serve applies without checking them
// among themselves, and with --config against that file's jobs, which
// serve would keep in force and refuse this one. --force does not pass
// it: serve would run the pair (or refuse the job) all the same.
func checkSharedLock(ctx context.Context, cat ledger.Catalog, c jobdefs.Change, configPath string, f *config.File) error {
	j, err := config.ParseJob("the job", []byte(c.Def))
	if err != nil {
		return err // config.Define accepted it: not expected
	}
	if f != nil {
		if msg := config.SharedLock(j, f.Jobs); msg != "" {
			return usagef("job %q cannot run beside a job of the configuration file %s: %s", c.Job, configPath, msg)
		}
	}
	defs, err := cat.JobDefs(ctx)
	if err != nil {
		return err
	}
	for _, def := range defs {
		if def.Job == c.Job || def.Def == "" {
			continue
		}
		o, err := config.ParseJob("job "+def.Job, []byte(def.Def))
		if err != nil {
			continue // serve does not apply it either
		}
		if msg := config.SharedLock(j, []config.Job{o}); msg != "" {
			return usagef("job %q cannot run beside job %q, defined at run time (version %d): %s", c.Job, def.Job, def.Version, msg)
		}
	}
	return nil
}

// jobsAudit is jobs audit: the audit entries, newest first.
func jobsAudit(ctx context.Context, a *adminArgs, l ledger.Ledger, job string, limit int, w io.Writer) error {
	cat, ok := l.(ledger.Catalog)
	if !ok {
		return fmt.Errorf("%s keeps no audit", redact.URL(a.store))
	}
	es, err := cat.Audit(ctx, ledger.AuditQuery{Job: job, Limit: limit})
	if err != nil {
		return err
	}
	if a.json {
		out := make([]apijson.Audit, len(es))
		for i, e := range es {
			out[i] = apijson.FromAudit(e)
		}
		return writeJSON(w, map[string]any{"audit": out})
	}
	if len(es) == 0 {
		fmt.Fprintln(w, "no audit entries")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tWHO\tJOB\tACTION\tDETAIL")
	for _, e := range es {
		detail := strings.ReplaceAll(e.Detail, "\n", "; ")
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.UTC().Format(time.RFC3339), redact.Printable(e.Who),
			redact.Printable(e.Job), redact.Printable(e.Action), redact.Printable(detail))
	}
	return tw.Flush()
}

// auditState appends the audit entry of a pause, resume, trigger or
// forget made by this command.
func auditState(ctx context.Context, l ledger.Ledger, p ledger.JobStateParams, op, note string) error {
	detail := ""
	if p.Trigger != "" {
		detail = apijson.TriggerDetail(p.Trigger, note)
	}
	if err := jobdefs.Record(ctx, l, ledger.AuditEntry{Who: cliActor(), Job: p.Job, Action: op, Detail: detail}); err != nil {
		return fmt.Errorf("%s done, but writing its audit entry failed: %w", op, err)
	}
	return nil
}
