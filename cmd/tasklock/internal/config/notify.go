package config

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The notification events, as notify.on names them: one for each outcome
// of a tick that is not ok, and recovery, the first ok after one of them.
const (
	EventFailure     = "failure"     // the tick's last attempt failed (status failed)
	EventTimeout     = "timeout"     // it timed out (status timeout)
	EventLost        = "lost"        // its lock was lost while it ran (status lost)
	EventMissed      = "missed"      // the tick did not run: missed by the misfire policy (status missed)
	EventInterrupted = "interrupted" // its node stopped before recording the outcome (status interrupted)
	EventRecovery    = "recovery"    // an ok after one of the above
)

// NotifyEvents are the events notify.on may name, in order; all of them
// when on is not given.
var NotifyEvents = []string{EventFailure, EventTimeout, EventLost, EventMissed, EventInterrupted, EventRecovery}

// Defaults of notify.
const (
	DefaultNotifyAttempts       = 5
	DefaultNotifyBackoff        = time.Second
	DefaultNotifyMaxTime        = 5 * time.Minute
	DefaultWebhookTimeout       = 10 * time.Second
	DefaultNotifyCommandTimeout = time.Minute
)

// notifyKeys are the keys of notify:, at the top of the file and in a job.
var notifyKeys = []string{"on", "webhook", "command", "command_timeout", "attempts", "backoff", "max_time"}

// Notify is where a job's notifications go and on which events (notify:).
// The file's top-level notify: applies to every job; a job's own notify:
// replaces the keys it gives (Merge). Fields left zero were not given.
type Notify struct {
	// Off is set by "notify: off": no notifications for the job.
	Off bool
	// On are the events notified, in NotifyEvents order; nil: not given
	// (all of them, after Merge).
	On []string
	// Webhook is the HTTP endpoint that gets each notification, POSTed
	// as JSON and signed; nil when none.
	Webhook *Webhook
	// Command is run with each notification as JSON on stdin; nil when
	// none.
	Command []string
	// CommandTimeout bounds one run of Command.
	CommandTimeout time.Duration
	// Attempts, Backoff and MaxTime bound the delivery of one
	// notification to one target: at most Attempts tries, Backoff before
	// the second, doubling (with jitter), none starting MaxTime after the
	// first.
	Attempts int
	Backoff  time.Duration
	MaxTime  time.Duration
}

// Webhook is notify.webhook.
type Webhook struct {
	// URL is an absolute http:// or https:// URL. It may hold a secret (a
	// password, a token in the query): print it with redact.URL.
	URL string
	// Secret is the HMAC-SHA256 key that signs each request: from
	// secret:, or from the variable SecretEnv names (read by Load; a job
	// defined at run time names only the variable, which the node
	// delivering reads). Never print it.
	Secret    string
	SecretEnv string
	// Timeout bounds one attempt.
	Timeout time.Duration
}

// Targets reports whether n names somewhere to send notifications.
func (n *Notify) Targets() bool { return n != nil && !n.Off && (n.Webhook != nil || n.Command != nil) }

// Wants reports whether n notifies event.
func (n *Notify) Wants(event string) bool {
	return n.Targets() && slices.Contains(n.On, event)
}

// Merge returns the notifications of a job: global (the file's notify:,
// or nil) with the keys job (the job's notify:, or nil) gives in place of
// its own, and the defaults for the keys neither gives. It returns nil
// when the job notifies nowhere.
func Merge(global, job *Notify) *Notify {
	if job != nil && job.Off {
		return nil
	}
	var out Notify
	if global != nil {
		out = *global
	}
	if job != nil {
		if job.On != nil {
			out.On = job.On
		}
		if job.Webhook != nil {
			out.Webhook = job.Webhook
		}
		if job.Command != nil {
			out.Command = job.Command
		}
		if job.CommandTimeout != 0 {
			out.CommandTimeout = job.CommandTimeout
		}
		if job.Attempts != 0 {
			out.Attempts = job.Attempts
		}
		if job.Backoff != 0 {
			out.Backoff = job.Backoff
		}
		if job.MaxTime != 0 {
			out.MaxTime = job.MaxTime
		}
	}
	if !out.Targets() {
		return nil
	}
	if out.On == nil {
		out.On = NotifyEvents
	}
	if out.CommandTimeout == 0 {
		out.CommandTimeout = DefaultNotifyCommandTimeout
	}
	if out.Attempts == 0 {
		out.Attempts = DefaultNotifyAttempts
	}
	if out.Backoff == 0 {
		out.Backoff = DefaultNotifyBackoff
	}
	if out.MaxTime == 0 {
		out.MaxTime = DefaultNotifyMaxTime
	}
	return &out
}

// Secrets returns the webhook secrets of the file (its notify: and every
// job's), for serve to keep out of the jobs' output.
func (f *File) Secrets() []string {
	var out []string
	add := func(n *Notify) {
		if n != nil && n.Webhook != nil && n.Webhook.Secret != "" {
			out = append(out, n.Webhook.Secret)
		}
	}
	add(f.Notify)
	for _, j := range f.Jobs {
		add(j.Notify)
	}
	return out
}

// notify reads notify: (at the top of the file, or in a job when p.jobLabel
// is set).
func (p *parser) notify(f field) *Notify {
	if isNull(f.val) {
		return nil
	}
	n := &Notify{}
	if p.jobLabel != "" {
		if p.notifyLines == nil {
			p.notifyLines = map[string]int{}
		}
		p.notifyLines[p.jobLabel] = f.key.Line
	}
	if f.val.Kind == yaml.ScalarNode {
		switch f.val.Value {
		case "off", "false", "none":
			n.Off = true
			return n
		}
		// Not quoted: it may be a webhook's URL, given here in the place
		// of webhook: {url: ...}, whose path can be its secret.
		p.errorf(f.val, "notify", "want a mapping of %s, or off; got %s", strings.Join(notifyKeys, ", "), shape(f.val))
		return nil
	}
	fields := p.mapping(f.val, "notify.", notifyKeys...)
	if fields == nil {
		return nil
	}
	if fd, ok := fields["on"]; ok && !isNull(fd.val) {
		n.On = p.notifyEvents(fd)
	}
	if fd, ok := fields["webhook"]; ok && !isNull(fd.val) {
		n.Webhook = p.webhook(fd)
	}
	if fd, ok := fields["command"]; ok && !isNull(fd.val) {
		n.Command = p.argv(fd.val, "notify.command")
	}
	if fd, ok := fields["command_timeout"]; ok {
		n.CommandTimeout = p.duration(fd, "notify.command_timeout")
	}
	if fd, ok := fields["attempts"]; ok {
		n.Attempts = p.integer(fd, "notify.attempts")
		if n.Attempts > 100 {
			p.errorf(fd.val, "notify.attempts", "%d is more than 100", n.Attempts)
		}
	}
	if fd, ok := fields["backoff"]; ok {
		n.Backoff = p.duration(fd, "notify.backoff")
	}
	if fd, ok := fields["max_time"]; ok {
		n.MaxTime = p.duration(fd, "notify.max_time")
	}
	_, hasHook := fields["webhook"]
	_, hasCmd := fields["command"]
	if p.jobLabel == "" && !hasHook && !hasCmd {
		p.errorf(f.val, "notify", "want a webhook or a command (or both) to send the notifications to")
	}
	return n
}

// notifyEvents reads notify.on: a list of events, or one alone.
func (p *parser) notifyEvents(f field) []string {
	items, ok := p.oneOrList(f, "notify.on", "a list of events ("+strings.Join(NotifyEvents, ", ")+")")
	if !ok {
		return nil
	}
	want := map[string]bool{}
	for i, e := range items {
		e = resolve(e)
		at := fmt.Sprintf("notify.on[%d]", i)
		switch {
		case e.Kind != yaml.ScalarNode || isNull(e):
			p.errorf(e, at, "want an event (%s), got %s", strings.Join(NotifyEvents, ", "), kind(e))
		case !slices.Contains(NotifyEvents, e.Value):
			p.errorf(e, at, "unknown event %s (want %s)", describe(e), strings.Join(NotifyEvents, ", "))
		case want[e.Value]:
			p.errorf(e, at, "%q is listed twice", e.Value)
		default:
			want[e.Value] = true
		}
	}
	out := []string{} // non-nil: given, maybe empty (notify of nothing)
	for _, e := range NotifyEvents {
		if want[e] {
			out = append(out, e)
		}
	}
	return out
}

// webhook reads notify.webhook.
func (p *parser) webhook(f field) *Webhook {
	fields := p.secretMapping(f.val, "notify.webhook.", "url", "secret", "secret_env", "timeout")
	if fields == nil {
		return nil
	}
	w := &Webhook{Timeout: DefaultWebhookTimeout}
	fd, ok := fields["url"]
	if ok {
		w.URL, _ = p.str(fd, "notify.webhook.url")
	}
	switch {
	case w.URL == "":
		at := f.val
		if ok {
			at = fd.val
		}
		p.errorf(at, "notify.webhook.url", "missing: want the http:// or https:// URL to POST the notifications to")
	default:
		p.httpURL(fd.val, "notify.webhook.url", w.URL)
	}
	sec, hasSec := fields["secret"]
	env, hasEnv := fields["secret_env"]
	switch {
	case hasSec && hasEnv:
		p.errorf(env.key, "notify.webhook.secret_env", "set together with secret (line %d): give one of them", sec.key.Line)
	case hasSec && p.runTime:
		p.errorf(sec.key, "notify.webhook.secret", "not in a job defined at run time, which the store and the dashboard keep: use secret_env, a variable of each serve's environment")
	case hasSec:
		if s, ok := p.str(sec, "notify.webhook.secret"); ok && s != "" {
			w.Secret = s
		} else {
			p.errorf(sec.val, "notify.webhook.secret", "empty")
		}
	case hasEnv:
		name, _ := p.str(env, "notify.webhook.secret_env")
		switch {
		case name == "":
			p.errorf(env.val, "notify.webhook.secret_env", "empty: want the name of the variable that holds the secret")
		case !envName(name):
			// Not quoted: it may be the secret itself, given in the
			// place of its variable's name.
			p.errorf(env.val, "notify.webhook.secret_env", "not a variable name (want letters, digits and _, not starting with a digit; to give the secret itself, use secret)")
		case p.runTime:
			w.SecretEnv = name // read by the delivering node
		default:
			w.SecretEnv = name
			if w.Secret = os.Getenv(name); w.Secret == "" {
				p.errorf(env.val, "notify.webhook.secret_env", "$%s is not set (or empty): the webhook's requests are signed with it", name)
			}
		}
	default:
		p.errorf(f.val, "notify.webhook.secret_env", "missing: the webhook's requests are signed (HMAC-SHA256): name the variable that holds the secret (secret_env), or give it (secret)")
	}
	if fd, ok := fields["timeout"]; ok {
		w.Timeout = p.positive(fd, "notify.webhook.timeout", DefaultWebhookTimeout)
	}
	return w
}

// envName reports whether s is a portable environment variable name.
func envName(s string) bool {
	for i, c := range s {
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

// argv reads a list of strings: a program and its arguments.
func (p *parser) argv(n *yaml.Node, name string) []string {
	if n.Kind != yaml.SequenceNode {
		// A command line given as one string is not quoted back: its
		// arguments may hold a password or a token.
		got := shape(n)
		if got == "a string" {
			if w := len(strings.Fields(n.Value)); w == 1 {
				got = "a string of 1 word"
			} else {
				got = fmt.Sprintf("a string of %d words", w)
			}
		}
		p.errorf(n, name, "want a list: the program and its arguments, e.g. [\"/usr/local/bin/report\", \"--all\"], got %s", got)
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, name, "empty: want the program and its arguments")
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, a := range n.Content {
		a = resolve(a)
		at := fmt.Sprintf("%s[%d]", name, i)
		switch {
		case a.Kind != yaml.ScalarNode || isNull(a):
			p.errorf(a, at, "want a string, got %s", kind(a))
		case strings.IndexByte(a.Value, 0) >= 0:
			p.errorf(a, at, "contains a NUL byte")
		case i == 0 && a.Value == "":
			p.errorf(a, at, "empty: want the program")
		}
		out = append(out, a.Value)
	}
	return out
}
