package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// Load reads and checks the configuration file at path. It returns an
// Errors listing every mistake when the file is invalid, and the error of
// the file system when it cannot be read.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize)}}
	}
	return Parse(path, data)
}

// Parse checks data as the contents of the configuration file name, which
// messages name.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{file: name}
	f := p.file_(data)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
		return nil, p.errs
	}
	return f, nil
}

// parser collects the mistakes of one file.
type parser struct {
	file     string
	jobLabel string // the job being read, for messages
	runTime  bool   // a job defined at run time (ParseJob, Define), not a file
	// stored: a job read back from the ledger (ParseJob), which may
	// predate a check: what only has no effect is a warning (Job.NoEffect)
	// there, so that the job still loads, and an error elsewhere.
	stored bool
	// notifyLines are where each job's notify: is, for checking them
	// against the file's once every job is read.
	notifyLines map[string]int
	errs        Errors
	deps        []jobDeps // the after: of each named job, for checkDeps
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Job: p.jobLabel, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// failed reports whether a mistake in field of the job being read was
// reported already.
func (p *parser) failed(field string) bool {
	for _, e := range p.errs {
		if e.Job == p.jobLabel && e.Field == field {
			return true
		}
	}
	return false
}

// yamlLine finds the line in the messages of the YAML parser.
var yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// syntax reports a YAML syntax error in data on the line where it is. The
// parser's own line is unreliable: it leaves it out for an error on the
// first line, and for a reader error (control characters) or an unknown
// anchor, and for some errors names the line where the enclosing
// collection starts. The line reported is the first whose prefix of the
// file fails with the same message, found by bisection; when none does, the
// parser's line.
func (p *parser) syntax(data []byte, err error) {
	msg, line := splitYAMLError(err)
	if l := errorLine(data, msg); l > 0 {
		line = l
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: "invalid YAML: " + msg + syntaxHint(data, line, msg)})
}

// reservedStart finds a plain value starting with one of YAML's reserved
// indicators, @ and `, after a key or a list's dash.
var reservedStart = regexp.MustCompile("(?:^|:|-)[ \t]+[@`]|^[@`]")

// syntaxHint explains the YAML error msg on line (1-based) of data where
// it comes from the two mistakes made most: an unquoted "@every 10s" (@
// cannot start a plain value) and a tab in the indentation.
func syntaxHint(data []byte, line int, msg string) string {
	if msg != "found character that cannot start any token" || line < 1 {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	if line > len(lines) {
		return ""
	}
	text := strings.TrimRight(lines[line-1], "\r")
	indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]
	switch {
	case strings.Contains(indent, "\t"):
		return " (YAML indents with spaces, not tabs)"
	case reservedStart.MatchString(strings.TrimLeft(text, " \t")):
		return " (a value starting with @ or ` needs quotes: schedule: \"@every 10s\")"
	}
	return ""
}

// splitYAMLError splits a YAML error into its message and line (0 when it
// names none).
func splitYAMLError(err error) (string, int) {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error(), 0
	}
	line, _ := strconv.Atoi(m[1])
	return m[2], line
}

// errorLine returns the first line n such that the first n lines of data
// fail to parse with the message msg, or 0.
func errorLine(data []byte, msg string) int {
	var ends []int // ends[i] is the end of line i+1, its newline included
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(n int) bool {
		dec := yaml.NewDecoder(bytes.NewReader(data[:ends[n-1]]))
		for {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if err == nil {
				continue
			}
			if errors.Is(err, io.EOF) {
				return false
			}
			m, _ := splitYAMLError(err)
			return m == msg
		}
	}
	lo, hi := 1, len(ends)
	if !fails(hi) {
		return 0
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// file_ reads the whole file.
func (p *parser) file_(data []byte) *File {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "", "empty: want a mapping with at least jobs")
		} else {
			p.syntax(data, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntax(data, err)
		return nil
	default:
		p.errorf(&extra, "", "a second YAML document: the file must hold one")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(root, "", "empty: want a mapping with at least jobs")
			return nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if isNull(root) {
		p.errorf(root, "", "empty: want a mapping with at least jobs")
		return nil
	}
	fields := p.mapping(root, "", "store", "node", "pools", "labels", "output_max", "preferred_nodes", "claim_ahead", "notify", "jobs")
	if fields == nil {
		return nil
	}
	f := &File{Store: DefaultStore, OutputMax: DefaultOutputMax}
	if fd, ok := fields["output_max"]; ok && !isNull(fd.val) {
		if fd.val.Kind != yaml.ScalarNode {
			p.errorf(fd.val, "output_max", "want a size such as 64KiB, got %s", kind(fd.val))
		} else if n, err := ParseSize(fd.val.Value); err != nil {
			p.errorf(fd.val, "output_max", "%s", err)
		} else {
			f.OutputMax = n
		}
	}
	if fd, ok := fields["preferred_nodes"]; ok && !isNull(fd.val) {
		if err := fd.val.Decode(&f.PreferredNodes); err != nil || fd.val.Kind != yaml.ScalarNode {
			p.errorf(fd.val, "preferred_nodes", "want true or false, got %q", fd.val.Value)
		}
	}
	if fd, ok := fields["claim_ahead"]; ok && !isNull(fd.val) {
		switch d := p.duration(fd, "claim_ahead"); {
		case d > schedule.MaxClaimAhead:
			p.errorf(fd.val, "claim_ahead", "%v is above the maximum %v", d, schedule.MaxClaimAhead)
		case d > 0 && f.PreferredNodes:
			p.errorf(fd.val, "claim_ahead", "cannot be used with preferred_nodes: true")
		default:
			f.ClaimAhead = d
		}
	}
	if fd, ok := fields["store"]; ok {
		if s, ok := p.str(fd, "store"); ok {
			switch {
			case s == "":
				p.errorf(fd.val, "store", "empty (omit it for %s)", DefaultStore)
			default:
				if err := storeurl.Check(s); err != nil {
					p.errorf(fd.val, "store", "%s", err.Error())
				}
				f.Store, f.StoreGiven = s, true
			}
		}
	}
	if fd, ok := fields["node"]; ok {
		if s, ok := p.str(fd, "node"); ok {
			if msg := checkName(s, tasklock.MaxOwnerLen); msg != "" {
				p.errorf(fd.val, "node", "%s", msg)
			}
			if s == "" {
				p.errorf(fd.val, "node", "empty (omit it for host:pid)")
			}
			f.Node = s
		}
	}
	p.limits(f, fields)
	if fd, ok := fields["notify"]; ok {
		f.Notify = p.notify(fd)
	}
	fd, ok := fields["jobs"]
	if !ok || isNull(fd.val) {
		at := root
		if ok {
			at = fd.key
		}
		p.errorf(at, "jobs", "missing: want a list of jobs")
		return f
	}
	if fd.val.Kind != yaml.SequenceNode {
		p.errorf(fd.val, "jobs", "want a list of jobs, got %s", kind(fd.val))
		return f
	}
	// An empty list is a fleet whose jobs are all defined at run time
	// (tasklock jobs create): serve runs those.
	pools := f.Pools
	if pools == nil {
		pools = map[string]int{} // non-nil: pool: is checked against the file
	}
	v := newValidator(pools)
	defer v.close()
	names := map[string]int{}
	for i, n := range fd.val.Content {
		if j, ok := p.job(i, resolve(n), names, v); ok {
			f.Jobs = append(f.Jobs, j)
		}
	}
	p.checkDeps(names)
	p.checkKeys(f.Jobs, f.Pools, names)
	for _, j := range f.Jobs {
		if n := j.Notify; n != nil && !n.Off && n.Webhook == nil && n.Command == nil && !f.Notify.Targets() {
			p.errs = append(p.errs, &Error{File: p.file, Line: p.notifyLines[j.Name], Job: j.Name, Field: "notify",
				Msg: "no webhook or command to send to, here or in the file's notify:"})
		}
	}
	return f
}

// field is one key and its value in a mapping.
type field struct{ key, val *yaml.Node }

// mapping checks that n is a mapping whose keys are among allowed, each
// once, and returns its fields by key; nil when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, prefix string, allowed ...string) map[string]field {
	return p.fields(n, kind, prefix, allowed...)
}

// secretMapping is mapping for a key whose value may hold a secret where a
// mapping is wanted (http: given a URL with its password, notify.webhook:
// given the hook's URL): a value that is no mapping is told by its shape
// (shape), never quoted.
func (p *parser) secretMapping(n *yaml.Node, prefix string, allowed ...string) map[string]field {
	return p.fields(n, shape, prefix, allowed...)
}

// fields is mapping, with got describing a value that is no mapping.
func (p *parser) fields(n *yaml.Node, got func(*yaml.Node) string, prefix string, allowed ...string) map[string]field {
	name := strings.TrimSuffix(prefix, ".")
	if n.Kind != yaml.MappingNode {
		want := "a mapping"
		if name != "" {
			want = "a mapping of " + strings.Join(allowed, ", ")
		}
		p.errorf(n, name, "want %s, got %s", want, got(n))
		return nil
	}
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, name, "want a key such as %s, got %s", allowed[0], kind(k))
			continue
		}
		switch {
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			p.errorf(k, prefix+"<<", "merge keys are not supported; write the keys out")
			continue
		case !slices.Contains(allowed, k.Value):
			p.errorf(k, prefix+clip(k.Value), "unknown key (want %s)", strings.Join(allowed, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			p.errorf(k, prefix+k.Value, "repeated (first on line %d)", prev.key.Line)
			continue
		}
		out[k.Value] = field{k, v}
	}
	return out
}

// str reads a scalar as a string; false when it is null or not a scalar.
func (p *parser) str(f field, name string) (string, bool) {
	switch {
	case isNull(f.val):
		return "", false
	case f.val.Kind != yaml.ScalarNode:
		p.errorf(f.val, name, "want a string, got %s", kind(f.val))
		return "", false
	}
	return f.val.Value, true
}

// duration reads a Go duration that is not negative; 0 when null.
func (p *parser) duration(f field, name string) time.Duration {
	s, ok := p.str(f, name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(f.val, name, "invalid duration %q (want e.g. 300ms, 10s, 1h30m)", clip(s))
	case d < 0:
		p.errorf(f.val, name, "%v is negative", d)
	case d > MaxDuration:
		p.errorf(f.val, name, "%v is above the maximum %v (365 days)", d, MaxDuration)
	}
	return d
}

// positive reads a duration above 0, for a key whose 0 would read as
// "none" or "at once" but whose default is another value: def when null
// or wrong.
func (p *parser) positive(f field, name string, def time.Duration) time.Duration {
	before := len(p.errs)
	d := p.duration(f, name)
	switch {
	case isNull(f.val) || len(p.errs) > before:
		return def
	case d == 0:
		p.errorf(f.val, name, "%v: want a duration above 0 (omit the key for the default %v)", d, def)
		return def
	}
	return d
}

// integer reads an integer that is not negative; 0 when null.
func (p *parser) integer(f field, name string) int {
	switch {
	case isNull(f.val):
		return 0
	case f.val.Kind != yaml.ScalarNode || f.val.ShortTag() != "!!int":
		p.errorf(f.val, name, "want a whole number, got %s", describe(f.val))
		return 0
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(f.val.Value, "_", ""), 0, 32)
	switch {
	case err != nil:
		p.errorf(f.val, name, "%s is out of range", clip(f.val.Value))
	case n < 0:
		p.errorf(f.val, name, "%d is negative", n)
	}
	return int(n)
}

// jobKeys are the keys of a job.
var jobKeys = []string{"name", "schedule", "timezone", "command", "kill_grace", "http", "timeout", "overlap", "misfire", "retries", "jitter", "lock_ttl", "min_hold", "max_hold", "run_on", "after", "within", "max_concurrent", "pool", "pool_wait", "nodes", "shards", "notify"}

// job reads the i-th job; false when it has mistakes.
func (p *parser) job(i int, n *yaml.Node, names map[string]int, v *validator) (Job, bool) {
	before := len(p.errs)
	p.jobLabel = fmt.Sprintf("jobs[%d]", i)
	defer func() { p.jobLabel = "" }()
	j := Job{Line: n.Line}
	// Name the job in messages about the keys before its name.
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
			if k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode && !isNull(v) && v.Value != "" && checkName(v.Value, schedule.MaxJobName) == "" {
				p.jobLabel = v.Value
				break
			}
		}
	}
	fields := p.mapping(n, "", jobKeys...)
	if fields == nil {
		return j, false
	}
	// lines are where each key's value is, for the scheduler's mistakes.
	lines := map[string]int{}
	for k, f := range fields {
		lines[k] = f.val.Line
	}
	if f, ok := fields["name"]; !ok || isNull(f.val) {
		p.errorf(n, "name", "missing")
	} else {
		if s, ok := p.str(f, "name"); ok {
			j.Name = s
			if msg := checkName(s, schedule.MaxJobName); msg != "" || s == "" {
				if s == "" {
					msg = "empty"
				}
				p.errorf(f.val, "name", "%s", msg)
			} else {
				p.jobLabel = s
				if prev, dup := names[s]; dup {
					p.errorf(f.val, "name", "a job of this name is on line %d already", prev)
				} else {
					names[s] = f.val.Line
				}
			}
		}
	}
	if f, ok := fields["schedule"]; ok {
		j.Schedule, _ = p.str(f, "schedule")
	}
	if j.Schedule == "" {
		at := n
		if f, ok := fields["schedule"]; ok {
			at = f.val
		}
		p.errorf(at, "schedule", "missing: want a cron spec (\"0 30 2 * * *\"), a descriptor (@daily) or @every D")
	}
	if f, ok := fields["timezone"]; ok {
		j.TimeZone, _ = p.str(f, "timezone")
	}
	if f, ok := fields["timeout"]; ok {
		j.Timeout = p.duration(f, "timeout")
	}
	if f, ok := fields["overlap"]; ok {
		if s, ok := p.str(f, "overlap"); ok {
			if err := j.Overlap.UnmarshalText([]byte(s)); err != nil {
				p.errorf(f.val, "overlap", "%s", strings.TrimPrefix(err.Error(), "schedule: "))
			}
		}
	}
	if f, ok := fields["misfire"]; ok {
		p.misfire(&j, f, lines)
	}
	if f, ok := fields["run_on"]; ok {
		if s, ok := p.str(f, "run_on"); ok {
			switch s {
			case "any":
			case "leader":
				j.LeaderOnly = true
			default:
				p.errorf(f.val, "run_on", "%q is not one of any (every node may run it, the default) or leader (only the fleet's elected leader runs it)", s)
			}
		}
	}
	if f, ok := fields["after"]; ok {
		p.after(&j, f)
	}
	if f, ok := fields["within"]; ok {
		j.Within = p.duration(f, "within")
	}
	if f, ok := fields["retries"]; ok {
		p.retries(&j, f, lines)
	}
	if f, ok := fields["shards"]; ok {
		j.Shards = p.integer(f, "shards")
	}
	for key, d := range map[string]*time.Duration{"jitter": &j.Jitter, "lock_ttl": &j.Lock.TTL, "min_hold": &j.Lock.MinHold, "max_hold": &j.Lock.MaxHold} {
		if f, ok := fields[key]; ok {
			*d = p.duration(f, key)
		}
	}
	p.jobLimits(&j, fields)
	if f, ok := fields["lock_ttl"]; ok && !isNull(f.val) && !takesLock(&j) {
		const why = "has no effect: overlap is allow and the job has no pool or max_concurrent, so its runs take no lock (remove lock_ttl, or set overlap: skip)"
		if p.stored {
			j.NoEffect = append(j.NoEffect, "lock_ttl "+why)
		} else {
			p.errorf(f.val, "lock_ttl", "%s", why)
		}
	}
	if f, ok := fields["notify"]; ok {
		j.Notify = p.notify(f)
	}
	p.handler(&j, n, fields, lines)
	reported := func(key string) bool {
		for _, e := range p.errs[before:] {
			if e.Field == key || strings.HasPrefix(key, e.Field+".") || strings.HasPrefix(e.Field, key+".") {
				return true
			}
		}
		return false
	}
	for _, e := range v.check(j.Job, reported) {
		line := j.Line
		for k := e.key; k != ""; k, _, _ = cutLast(k, ".") {
			if l, ok := lines[k]; ok {
				line = l
				break
			}
		}
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Job: p.jobLabel, Field: e.key, Msg: e.msg})
	}
	return j, len(p.errs) == before
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return "", s, false
}

// misfire reads "misfire: POLICY" or "misfire: {policy, grace, window, max}".
func (p *parser) misfire(j *Job, f field, lines map[string]int) {
	if isNull(f.val) {
		return
	}
	if f.val.Kind == yaml.ScalarNode {
		lines["misfire.policy"] = f.val.Line
		if err := j.Misfire.UnmarshalText([]byte(f.val.Value)); err != nil {
			p.errorf(f.val, "misfire", "%s", strings.TrimPrefix(err.Error(), "schedule: "))
		}
		return
	}
	fields := p.mapping(f.val, "misfire.", "policy", "grace", "window", "max")
	if fields == nil {
		return
	}
	for k, fd := range fields {
		lines["misfire."+k] = fd.val.Line
	}
	if fd, ok := fields["policy"]; ok {
		if s, ok := p.str(fd, "misfire.policy"); ok {
			if err := j.Misfire.UnmarshalText([]byte(s)); err != nil {
				p.errorf(fd.val, "misfire.policy", "%s", strings.TrimPrefix(err.Error(), "schedule: "))
			}
		}
	}
	if fd, ok := fields["grace"]; ok {
		j.MisfireAfter = p.duration(fd, "misfire.grace")
	}
	if fd, ok := fields["window"]; ok {
		j.MisfireWindow = p.duration(fd, "misfire.window")
	}
	if fd, ok := fields["max"]; ok {
		j.CatchUpMax = p.integer(fd, "misfire.max")
		if j.Misfire != schedule.MisfireCatchUp && !isNull(fd.val) {
			p.errorf(fd.val, "misfire.max", "applies to policy catch_up only (policy is %s)", j.Misfire)
		}
	}
}

// retries reads "retries: N" or "retries: {max, backoff, backoff_max}".
func (p *parser) retries(j *Job, f field, lines map[string]int) {
	if isNull(f.val) {
		return
	}
	if f.val.Kind == yaml.ScalarNode {
		lines["retries.max"] = f.val.Line
		j.Retries = p.integer(f, "retries")
		return
	}
	fields := p.mapping(f.val, "retries.", "max", "backoff", "backoff_max")
	if fields == nil {
		return
	}
	for k, fd := range fields {
		lines["retries."+k] = fd.val.Line
	}
	if fd, ok := fields["max"]; ok {
		j.Retries = p.integer(fd, "retries.max")
	}
	if fd, ok := fields["backoff"]; ok {
		j.RetryBackoff = p.duration(fd, "retries.backoff")
	}
	if fd, ok := fields["backoff_max"]; ok {
		j.RetryBackoffMax = p.duration(fd, "retries.backoff_max")
	}
}

// handler reads command (with kill_grace) or http.
func (p *parser) handler(j *Job, n *yaml.Node, fields map[string]field, lines map[string]int) {
	cmd, hasCmd := fields["command"]
	hf, hasHTTP := fields["http"]
	hasCmd = hasCmd && !isNull(cmd.val)
	hasHTTP = hasHTTP && !isNull(hf.val)
	switch {
	case hasCmd && hasHTTP:
		p.errorf(hf.key, "http", "set together with command (line %d): a job has one of them", cmd.key.Line)
		return
	case !hasCmd && !hasHTTP:
		p.errorf(n, "command", "missing: a job needs a command (a list: program and arguments) or an http request")
		return
	}
	kg, hasKG := fields["kill_grace"]
	if hasHTTP {
		if hasKG {
			p.errorf(kg.key, "kill_grace", "applies to command jobs only")
		}
		p.http(j, hf)
		return
	}
	if j.Command = p.argv(cmd.val, "command"); j.Command == nil {
		return
	}
	j.KillGrace = DefaultKillGrace
	if hasKG {
		j.KillGrace = p.positive(kg, "kill_grace", DefaultKillGrace)
	}
	// A job whose runs take no lock has none to lose: kill_grace only
	// spaces SIGTERM and SIGKILL, and is no Lock.Grace (lock_ttl is
	// refused above).
	lock := takesLock(j)
	ttl := j.Lock.TTL
	if ttl == 0 {
		ttl = tasklock.DefaultTTL
	}
	// Not when either value was refused already: the relation would be
	// told with a value the user did not write (the default 2s in place of
	// a refused kill_grace: 0s), or a second time (lock_ttl: 1ms).
	if lock && j.KillGrace >= ttl/2 && !p.failed("kill_grace") && !p.failed("lock_ttl") {
		at, field := n, "kill_grace"
		if hasKG {
			at = kg.val
		} else if _, ok := lines["lock_ttl"]; ok {
			at, field = fields["lock_ttl"].val, "lock_ttl"
		}
		p.errorf(at, field, "kill_grace %v must be less than half of lock_ttl %v, so that a command that lost its lock is stopped soon after", j.KillGrace, ttl)
		return // said once: the scheduler's own check of Lock.Grace would repeat it
	}
	if mh := j.Lock.MaxHold; !hasKG && mh > 0 && j.KillGrace >= mh {
		// The scheduler's check of Lock.Grace would name kill_grace,
		// which the file does not say, on the job's line.
		p.errorf(fields["max_hold"].val, "max_hold", "%v is not more than kill_grace %v (the default): the command gets SIGTERM kill_grace before max_hold", mh, j.KillGrace)
		return
	}
	// SIGTERM comes kill_grace before the lock could go to another node,
	// so that SIGKILL lands before it can.
	if lock {
		j.Lock.Grace = j.KillGrace
	}
}

// takesLock reports whether j's runs hold a lease whose options are
// lock_ttl's and kill_grace's: the job's lock (overlap skip), or a permit
// of its pool or of max_concurrent's semaphore.
func takesLock(j *Job) bool {
	return j.Overlap != schedule.OverlapAllow || j.Pool != "" || j.MaxConcurrent > 0
}

// httpURL checks an absolute http:// or https:// URL, the value of n;
// messages show it through redact.URL.
func (p *parser) httpURL(n *yaml.Node, field, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		p.errorf(n, field, "invalid URL %q", clip(redact.URL(raw)))
	case u.Scheme != "http" && u.Scheme != "https":
		p.errorf(n, field, "%q: want an http:// or https:// URL", clip(redact.URL(raw)))
	case u.Host == "":
		p.errorf(n, field, "%q has no host", clip(redact.URL(raw)))
	}
}

// headerName is the syntax of an HTTP header name (a token, RFC 9110).
var headerName = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// http reads an http request.
func (p *parser) http(j *Job, f field) {
	fields := p.secretMapping(f.val, "http.", "method", "url", "headers", "body", "timeout")
	if fields == nil {
		return
	}
	h := &HTTP{Method: "GET", Timeout: DefaultHTTPTimeout}
	j.HTTP = h
	if fd, ok := fields["method"]; ok {
		if s, ok := p.str(fd, "http.method"); ok {
			if !headerName.MatchString(s) {
				p.errorf(fd.val, "http.method", "invalid method %q", clip(s))
			}
			h.Method = s
		}
	}
	fd, ok := fields["url"]
	if ok {
		h.URL, _ = p.str(fd, "http.url")
	}
	switch {
	case h.URL == "" && ok:
		p.errorf(fd.val, "http.url", "missing")
	case h.URL == "":
		p.errorf(f.val, "http.url", "missing")
	default:
		p.httpURL(fd.val, "http.url", h.URL)
	}
	if fd, ok := fields["headers"]; ok && !isNull(fd.val) {
		p.headers(h, fd.val)
	}
	if fd, ok := fields["body"]; ok {
		h.Body, _ = p.str(fd, "http.body")
	}
	if fd, ok := fields["timeout"]; ok {
		h.Timeout = p.positive(fd, "http.timeout", DefaultHTTPTimeout)
	}
}

// headers reads http.headers. Header values are secret (Authorization):
// no message quotes one, nor what a header name was given in their
// place; the dashboard shows them masked.
func (p *parser) headers(h *HTTP, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "http.headers", "want a mapping of header names to values, got %s", shape(n))
		return
	}
	h.Headers = map[string]string{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode || isNull(k):
			p.errorf(k, "http.headers", "want a header name, got %s", kind(k))
			continue
		case !headerName.MatchString(k.Value):
			p.errorf(k, "http.headers", "invalid header name %s", badHeaderName(k.Value))
			continue
		}
		name := textproto.CanonicalMIMEHeaderKey(k.Value)
		field := "http.headers." + name
		switch {
		case strings.HasPrefix(name, "X-Tasklock-"):
			p.errorf(k, field, "reserved: tasklock sets the X-Tasklock-* headers")
			continue
		case lines[name] > 0:
			p.errorf(k, field, "repeated (first on line %d)", lines[name])
			continue
		case v.Kind != yaml.ScalarNode:
			p.errorf(v, field, "want a string, got %s", kind(v))
			continue
		}
		for _, c := range v.Value {
			if c < 0x20 && c != '\t' || c == 0x7f {
				p.errorf(v, field, "contains control character %U", c)
				break
			}
		}
		lines[name] = k.Line
		h.Headers[name] = v.Value
	}
}

// checkName checks a name that goes into the store: valid UTF-8 without
// control characters (unicode.IsControl), at most max bytes. It returns "" when it is fine.
func checkName(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("%d bytes long, the maximum is %d", len(s), max)
	}
	return redact.CheckName(s)
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kind describes a node's kind for messages.
func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return describe(n)
	}
	return "an alias"
}

// shape describes a node's kind as kind does, but a scalar by its type
// alone ("a string", "a number"), never by its value: for a key whose
// value may be secret.
func shape(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return kind(n)
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

// badHeaderName says what is wrong with s, an invalid header name, for a
// message: it quotes s up to its first character that a name cannot hold,
// and names that one, but shows nothing after it, where a header's value
// may follow ("Authorization: Bearer TOKEN" given as the name).
func badHeaderName(s string) string {
	if s == "" {
		return `"": empty`
	}
	i := 0
	for i < len(s) && headerName.MatchString(s[i:i+1]) {
		i++
	}
	bad := fmt.Sprintf("byte %#x", s[i])
	if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size > 1 {
		bad = strconv.QuoteRune(r)
	}
	if i == 0 {
		return fmt.Sprintf("starting with %s, which cannot be in a header name", bad)
	}
	return fmt.Sprintf("%s: %s cannot be in a header name", strconv.Quote(clip(s[:i])+"…"), bad)
}

// describe quotes a scalar, shortened.
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kind(n)
	}
	return strconv.Quote(clip(n.Value))
}

// clip shortens s for a message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// validator checks jobs the way schedule.Scheduler.Add does, by adding them
// to a Scheduler on an in-process store that is never started.
type validator struct {
	store *memstore.Store
	lk    *tasklock.Locker
	pools map[string]int // the file's, for pool:; nil for a job defined at run time (any pool)
}

func newValidator(pools map[string]int) *validator {
	store := memstore.New(nil)
	lk, err := tasklock.New(store, &tasklock.Config{Owner: "validate"})
	if err != nil {
		panic(err) // constant arguments
	}
	return &validator{store: store, lk: lk, pools: pools}
}

func (v *validator) close() { _ = v.lk.Close() }

// jobMistake is a mistake the scheduler found, by configuration key.
type jobMistake struct{ key, msg string }

// fieldKeys maps schedule.Job's fields to the configuration keys.
var fieldKeys = map[string]string{
	"Job.Name": "name", "Job.Schedule": "schedule", "Job.TimeZone": "timezone",
	"Job.Overlap": "overlap", "Job.Misfire": "misfire.policy", "Job.MisfireAfter": "misfire.grace",
	"Job.MisfireWindow": "misfire.window", "Job.CatchUpMax": "misfire.max", "Job.Timeout": "timeout",
	"Job.Retries": "retries.max", "Job.RetryBackoff": "retries.backoff", "Job.RetryBackoffMax": "retries.backoff_max",
	"Job.Jitter": "jitter", "Job.LeaderOnly": "run_on", "Job.After": "after", "Job.Within": "within", "Job.Lock.TTL": "lock_ttl", "Job.Lock.MinHold": "min_hold", "Job.Lock.MaxHold": "max_hold", "Job.Lock.Grace": "kill_grace",
	"Job.MaxConcurrent": "max_concurrent", "Job.Pool": "pool", "Job.PoolWait": "pool_wait", "Job.Nodes": "nodes",
	"Job.Shards": "shards",
}

// goNames rewrites the field names in the scheduler's reasons.
var goNames = strings.NewReplacer(
	"Config.ClaimRetention", "the claim retention", "MisfireAfter", "misfire.grace",
	"MisfireWindow", "misfire.window", "RetryBackoffMax", "retries.backoff_max", "RetryBackoff", "retries.backoff",
	"MaxHold", "max_hold", "MinHold", "min_hold", "Overlap is", "overlap is", "Job.Schedule", "schedule",
	"half the TTL", "half of lock_ttl", "Job.After", "after", "set with LeaderOnly", "set with run_on: leader",
	"Config.Pools has", "pools: defines", "Config.Pools is empty", "the file defines no pools:", "Job.Pool is not", "pool is not",
)

// check returns the scheduler's mistakes in j, except those about keys
// already reported. The scheduler names one mistake at a time: check
// clears the field at fault and asks again.
func (v *validator) check(j schedule.Job, reported func(key string) bool) []jobMistake {
	// serve elects a leader: run_on: leader is checked as it will run.
	pools := v.pools
	if pools == nil && j.Pool != "" {
		// A job defined at run time names a pool of the nodes' files,
		// which the node that applies it checks.
		pools = map[string]int{j.Pool: 1}
	}
	s, err := schedule.New(v.lk, v.store, &schedule.Config{IsLeader: func() bool { return false }, Pools: pools})
	if err != nil {
		panic(err) // constant arguments
	}
	j.Name = "job" // checked by the parser, by the same rules
	// The parents are checked by the parser too, against the file's
	// jobs (checkDeps); the scheduler checks Within against them.
	parents := make([]string, len(j.After))
	for i := range parents {
		parents[i] = fmt.Sprintf("parent-%d", i)
	}
	j.After = parents
	j.Handler = func(context.Context, schedule.Run) error { return nil }
	var out []jobMistake
	// One mistake a field at most, Job.Lock's counted one by one.
	for range reflect.TypeFor[schedule.Job]().NumField() + reflect.TypeFor[tasklock.ObtainOptions]().NumField() {
		err := s.Add(j)
		if err == nil {
			break
		}
		var oe *tasklock.OptionError
		if !errors.As(err, &oe) {
			return append(out, jobMistake{"", err.Error()})
		}
		key := fieldKeys[oe.Field]
		if key == "" {
			key = oe.Field
		}
		if !reported(key) {
			out = append(out, jobMistake{key, goNames.Replace(reason(oe))})
		}
		f := fieldByPath(reflect.ValueOf(&j).Elem(), strings.TrimPrefix(oe.Field, "Job."))
		switch {
		case oe.Field == "Job.Schedule":
			if j.Schedule == "@every 1s" {
				return out
			}
			j.Schedule = "@every 1s"
		case !f.IsValid() || f.IsZero():
			return out
		default:
			f.SetZero()
		}
	}
	return out
}

// reason is what the scheduler's *tasklock.OptionError says is wrong,
// without the job and field.
func reason(oe *tasklock.OptionError) string {
	if oe.Reason == "" && oe.Err != nil {
		return oe.Err.Error()
	}
	return oe.Reason
}

// fieldByPath returns the field of v at a dotted path ("Lock.TTL"), or the
// zero Value when there is none.
func fieldByPath(v reflect.Value, path string) reflect.Value {
	for name := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		if v = v.FieldByName(name); !v.IsValid() {
			return v
		}
	}
	return v
}

// limits reads the top-level pools and labels.
func (p *parser) limits(f *File, fields map[string]field) {
	if fd, ok := fields["pools"]; ok && !isNull(fd.val) {
		if fd.val.Kind != yaml.MappingNode {
			p.errorf(fd.val, "pools", "want a mapping of pool names to sizes, e.g. {reports: 2}, got %s", kind(fd.val))
		} else {
			f.Pools = map[string]int{}
			for i := 0; i+1 < len(fd.val.Content); i += 2 {
				k, v := resolve(fd.val.Content[i]), resolve(fd.val.Content[i+1])
				if k.Kind != yaml.ScalarNode || isNull(k) {
					p.errorf(k, "pools", "want a pool name, got %s", kind(k))
					continue
				}
				name := "pools." + clip(k.Value)
				if msg := schedule.CheckLabel(k.Value); msg != "" {
					p.errorf(k, name, "invalid pool name: %s", msg)
					continue
				}
				if _, dup := f.Pools[k.Value]; dup {
					p.errorf(k, name, "repeated")
					continue
				}
				before := len(p.errs)
				n := p.integer(field{k, v}, name)
				switch {
				case len(p.errs) > before:
				case isNull(v):
					p.errorf(v, name, "missing: want the pool's size, how many of its runs may be in progress at once")
				case n < 1 || n > tasklock.MaxPermits:
					p.errorf(v, name, "%d is not within [1, %d]", n, tasklock.MaxPermits)
				}
				// A bad size is reported here; the jobs of the pool are
				// checked as if it were 1 (the file is refused anyway).
				f.Pools[k.Value] = min(max(n, 1), tasklock.MaxPermits)
			}
		}
	}
	if fd, ok := fields["labels"]; ok {
		f.Labels = p.labels(fd, "labels")
	}
}

// labels reads a list of node labels.
func (p *parser) labels(f field, name string) []string {
	if isNull(f.val) {
		return nil
	}
	if f.val.Kind != yaml.SequenceNode {
		p.errorf(f.val, name, "want a list of labels, e.g. [gpu, zone=eu], got %s", kind(f.val))
		return nil
	}
	var out []string
	for i, n := range f.val.Content {
		n = resolve(n)
		at := fmt.Sprintf("%s[%d]", name, i)
		switch {
		case n.Kind != yaml.ScalarNode || isNull(n):
			p.errorf(n, at, "want a label, got %s", kind(n))
			continue
		case slices.Contains(out, n.Value):
			p.errorf(n, at, "%q is listed twice", clip(n.Value))
			continue
		}
		if msg := schedule.CheckLabel(n.Value); msg != "" {
			p.errorf(n, at, "%s", msg)
			continue
		}
		out = append(out, n.Value)
	}
	return out
}

// jobLimits reads a job's max_concurrent, pool, pool_wait and nodes.
func (p *parser) jobLimits(j *Job, fields map[string]field) {
	if f, ok := fields["max_concurrent"]; ok {
		j.MaxConcurrent = p.integer(f, "max_concurrent")
		if o, ok := fields["overlap"]; ok && j.MaxConcurrent > 0 && j.Overlap == schedule.OverlapSkip && !isNull(o.val) {
			p.errorf(o.val, "overlap", "skip, and max_concurrent is %d: max_concurrent lets up to that many runs overlap (omit overlap, or set it to allow)", j.MaxConcurrent)
		}
		if j.MaxConcurrent > 0 {
			j.Overlap = schedule.OverlapAllow // as the scheduler runs it
		}
	}
	if f, ok := fields["pool"]; ok {
		j.Pool, _ = p.str(f, "pool")
	}
	if f, ok := fields["pool_wait"]; ok {
		j.PoolWait = p.duration(f, "pool_wait")
	}
	if f, ok := fields["nodes"]; ok {
		j.Nodes = p.labels(f, "nodes")
	}
}

// jobDeps is the after: of one job, with where its names are.
type jobDeps struct {
	job   string
	line  int      // of the after: value
	after []string // as written, the bad names left out
	lines []int    // of each name in after
}

// oneOrList returns the items of f's value: those of a list, or the value
// alone when it is a scalar. Anything else is reported under key, as not
// what want names, and ok is false.
func (p *parser) oneOrList(f field, key, want string) (items []*yaml.Node, ok bool) {
	switch f.val.Kind {
	case yaml.SequenceNode:
		return f.val.Content, true
	case yaml.ScalarNode:
		return []*yaml.Node{f.val}, true
	}
	p.errorf(f.val, key, "want %s, got %s", want, kind(f.val))
	return nil, false
}

// after reads "after: [a, b]" (or "after: a"): the names of the job's
// parents, each once. checkDeps checks them against the file's jobs.
func (p *parser) after(j *Job, f field) {
	if isNull(f.val) {
		return
	}
	items, ok := p.oneOrList(f, "after", "a list of job names")
	if !ok {
		return
	}
	d := jobDeps{job: j.Name, line: f.val.Line}
	seen := map[string]int{}
	for _, n := range items {
		n = resolve(n)
		switch {
		case n.Kind != yaml.ScalarNode || isNull(n):
			p.errorf(n, "after", "want a job's name, got %s", kind(n))
			continue
		case n.Value == "":
			p.errorf(n, "after", "empty: want a job's name")
			continue
		}
		if msg := checkName(n.Value, schedule.MaxJobName); msg != "" {
			p.errorf(n, "after", "%s", msg)
			continue
		}
		if prev, dup := seen[n.Value]; dup {
			p.errorf(n, "after", "%q is named twice (first on line %d)", n.Value, prev)
			continue
		}
		seen[n.Value] = n.Line
		d.after = append(d.after, n.Value)
		d.lines = append(d.lines, n.Line)
	}
	j.After = d.after
	if j.Name != "" && p.jobLabel == j.Name {
		p.deps = append(p.deps, d)
	}
}

// checkDeps checks the parents of every job: each is a job of the file
// (names), and no job depends on itself through others. A cycle is
// reported once, at the after: of its first job in the file.
func (p *parser) checkDeps(names map[string]int) {
	graph := make(map[string][]string, len(p.deps))
	for _, d := range p.deps {
		graph[d.job] = d.after
		for i, parent := range d.after {
			if _, ok := names[parent]; !ok {
				p.errs = append(p.errs, &Error{File: p.file, Line: d.lines[i], Job: d.job, Field: "after",
					Msg: fmt.Sprintf("unknown job %q: no job of this name in the file", clip(parent))})
			}
		}
	}
	inCycle := map[string]bool{}
	for _, d := range p.deps {
		c := schedule.Cycle(d.job, d.after, func(name string) []string { return graph[name] })
		if c == nil || slices.ContainsFunc(c, func(n string) bool { return inCycle[n] }) {
			continue
		}
		for _, n := range c {
			inCycle[n] = true
		}
		p.errs = append(p.errs, &Error{File: p.file, Line: d.line, Job: d.job, Field: "after",
			Msg: "cycle " + schedule.CycleText(c) + ": a job cannot wait for itself"})
	}
}

// checkKeys refuses two jobs whose runs would take one lock, which would
// exclude each other though their names differ: the scheduler's lock of a
// job is its name under schedule.DefaultKeyPrefix, a shard's is the job's
// + "/shard/" + the index, so a job named "x/shard/2" takes the lock of
// shard 2 of a sharded job x. Likewise max_concurrent's semaphore (the
// name + "/running") and a pool's ("pool/" + the pool) would share their
// permits. The mistake is reported at the job that is not sharded (or the
// max_concurrent job), naming the other.
func (p *parser) checkKeys(jobs []Job, pools map[string]int, names map[string]int) {
	for _, j := range jobs {
		for _, o := range jobs {
			if k, ok := shardLockOf(j, o); ok {
				p.errs = append(p.errs, &Error{File: p.file, Line: names[j.Name], Job: j.Name, Field: "name",
					Msg: fmt.Sprintf("its lock %q is the lock of shard %d of job %q (line %d): the two would exclude each other; rename one",
						schedule.DefaultKeyPrefix+j.Name, k, clip(o.Name), names[o.Name])})
				break
			}
		}
		if j.MaxConcurrent > 0 {
			if pool, ok := strings.CutPrefix(j.Name+"/running", "pool/"); ok {
				if _, ok := pools[pool]; ok {
					p.errs = append(p.errs, &Error{File: p.file, Line: names[j.Name], Job: j.Name, Field: "max_concurrent",
						Msg: fmt.Sprintf("its semaphore %q is the one of pool %q: the two would share their permits; rename the job or the pool",
							schedule.DefaultKeyPrefix+j.Name+"/running", clip(pool))})
				}
			}
		}
	}
}

// SharedLock returns why j cannot run beside the jobs others (a job
// defined at run time beside the file's), or "": a lock j's runs take is
// one a job of others takes (see checkKeys, which checks a file's jobs
// among themselves). A job of others named like j is passed over.
func SharedLock(j Job, others []Job) string {
	for _, o := range others {
		switch {
		case o.Name == j.Name:
		default:
			if k, ok := shardLockOf(j, o); ok {
				return fmt.Sprintf("its lock %q is the lock of shard %d of job %q: the two would exclude each other; rename one",
					schedule.DefaultKeyPrefix+j.Name, k, clip(o.Name))
			}
			if k, ok := shardLockOf(o, j); ok {
				return fmt.Sprintf("the lock of its shard %d, %q, is the lock of job %q: the two would exclude each other; rename one",
					k, schedule.DefaultKeyPrefix+o.Name, clip(o.Name))
			}
		}
	}
	return ""
}

// shardLockOf reports whether j, not sharded, takes the lock of a shard of
// the sharded job o, and which.
func shardLockOf(j, o Job) (int, bool) {
	if j.Shards > 1 || o.Shards <= 1 {
		return 0, false
	}
	return shardOf(j.Name, o)
}

// shardOf reports whether name is the lock key, under the key prefix, of a
// shard of the sharded job j, and which.
func shardOf(name string, j Job) (int, bool) {
	rest, ok := strings.CutPrefix(name, j.Name+"/shard/")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	if err != nil || k < 0 || k >= j.Shards || strconv.Itoa(k) != rest {
		return 0, false
	}
	return k, true
}

// SchedulerError rewrites an error of schedule.Scheduler.Add in the words
// of the configuration: the key at fault and its reason (`job "x": pool:
// unknown pool "p" (pools: defines a, b)`) rather than the Go field
// (Job.Pool, Config.Pools). Other errors are returned as they are.
func SchedulerError(err error) error {
	var oe *tasklock.OptionError
	if !errors.As(err, &oe) || !strings.HasPrefix(oe.Field, "Job.") {
		return err
	}
	key := fieldKeys[oe.Field]
	if key == "" {
		key = oe.Field
	}
	msg := key + ": " + goNames.Replace(reason(oe))
	if oe.Job != "" {
		msg = fmt.Sprintf("job %q: %s", oe.Job, msg)
	}
	return errors.New(msg)
}
