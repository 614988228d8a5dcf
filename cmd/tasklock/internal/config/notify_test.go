package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// notify: at the top applies to every job; a job's notify: replaces the
// keys it gives, and notify: off turns them off.
func TestParseNotify(t *testing.T) {
	t.Setenv("HOOK_SECRET", "s3cret")
	in := `notify:
  on: [failure, recovery]
  webhook: {url: "https://hooks.example.com/t?k=1", secret_env: HOOK_SECRET, timeout: 3s}
  attempts: 3
  backoff: 2s
jobs:
  - name: a
    schedule: "@every 1m"
    command: [a]
  - name: b
    schedule: "@every 1m"
    command: [b]
    notify: {on: [timeout], command: [page, ops], max_time: 1m}
  - name: c
    schedule: "@every 1m"
    command: [c]
    notify: off
`
	f, err := Parse("c.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	a := Merge(f.Notify, f.Jobs[0].Notify)
	if a == nil || !reflect.DeepEqual(a.On, []string{"failure", "recovery"}) || a.Webhook == nil || a.Command != nil ||
		a.Webhook.Secret != "s3cret" || a.Webhook.Timeout != 3*time.Second || a.Attempts != 3 || a.Backoff != 2*time.Second || a.MaxTime != DefaultNotifyMaxTime {
		t.Errorf("a: %+v", a)
	}
	b := Merge(f.Notify, f.Jobs[1].Notify)
	if b == nil || !reflect.DeepEqual(b.On, []string{"timeout"}) || b.Webhook != a.Webhook || !reflect.DeepEqual(b.Command, []string{"page", "ops"}) ||
		b.MaxTime != time.Minute || b.Attempts != 3 || !b.Wants("timeout") || b.Wants("failure") {
		t.Errorf("b: %+v", b)
	}
	if c := Merge(f.Notify, f.Jobs[2].Notify); c != nil {
		t.Errorf("c has notify: off, got %+v", c)
	}
	if got := f.Secrets(); !reflect.DeepEqual(got, []string{"s3cret"}) {
		t.Errorf("secrets %q", got)
	}
	// Every event by default.
	g, err := Parse("c.yaml", []byte("notify: {command: [x]}\njobs: [{name: a, schedule: '@daily', command: [true]}]"))
	if err != nil {
		t.Fatal(err)
	}
	if m := Merge(g.Notify, nil); !reflect.DeepEqual(m.On, NotifyEvents) || m.Attempts != DefaultNotifyAttempts {
		t.Errorf("defaults: %+v", m)
	}
}

// Every mistake in notify: names its key, and the secret is never in a
// message.
func TestParseNotifyErrors(t *testing.T) {
	t.Setenv("EMPTY_SECRET", "")
	job := "jobs:\n  - name: j\n    schedule: '@every 1s'\n    command: [x]\n"
	for _, tt := range []struct {
		name, in string
		want     []string
	}{
		{"unknown event", "notify: {on: [failure, fail], command: [x]}\n" + job,
			[]string{`c.yaml:1: notify.on[1]: unknown event "fail" (want failure, timeout, lost, missed, interrupted, recovery)`}},
		{"unknown key", "notify: {command: [x], retry: 3}\n" + job,
			[]string{`c.yaml:1: notify.retry: unknown key (want on, webhook, command, command_timeout, attempts, backoff, max_time)`}},
		{"bad URL", "notify:\n  webhook: {url: \"ftp://u:hunter2@h/x\", secret: k}\n" + job,
			[]string{`c.yaml:2: notify.webhook.url: "ftp://u:xxxxx@h/x": want an http:// or https:// URL`}},
		{"missing secret env", "notify:\n  webhook: {url: \"https://h/x\", secret_env: NO_SUCH_SECRET_VAR}\n" + job,
			[]string{`c.yaml:2: notify.webhook.secret_env: $NO_SUCH_SECRET_VAR is not set (or empty): the webhook's requests are signed with it`}},
		{"empty secret env", "notify:\n  webhook: {url: \"https://h/x\", secret_env: EMPTY_SECRET}\n" + job,
			[]string{`c.yaml:2: notify.webhook.secret_env: $EMPTY_SECRET is not set (or empty): the webhook's requests are signed with it`}},
		// A hook's URL can be its secret (its path, as Slack's): given
		// where a mapping is wanted, it is not quoted; nor what was given
		// as secret_env's variable name, which may be the secret itself.
		{"notify a URL", "notify: https://h/services/hunter2\n" + job,
			[]string{`c.yaml:1: notify: want a mapping of on, webhook, command, command_timeout, attempts, backoff, max_time, or off; got a string`}},
		{"webhook a URL", "notify:\n  webhook: https://u:hunter2@h/services/hunter2\n" + job,
			[]string{`c.yaml:2: notify.webhook: want a mapping of url, secret, secret_env, timeout, got a string`}},
		{"secret as secret env", "notify:\n  webhook: {url: \"https://h/x\", secret_env: \"hunter2+/=\"}\n" + job,
			[]string{`c.yaml:2: notify.webhook.secret_env: not a variable name (want letters, digits and _, not starting with a digit; to give the secret itself, use secret)`}},
		{"no secret", "notify:\n  webhook: {url: \"https://h/x\"}\n" + job,
			[]string{`c.yaml:2: notify.webhook.secret_env: missing: the webhook's requests are signed (HMAC-SHA256): name the variable that holds the secret (secret_env), or give it (secret)`}},
		{"no target", "notify: {on: [failure]}\n" + job,
			[]string{`c.yaml:1: notify: want a webhook or a command (or both) to send the notifications to`}},
		{"job without target", job + "    notify: {on: [failure]}\n",
			[]string{`c.yaml:5: job "j": notify: no webhook or command to send to, here or in the file's notify:`}},
		{"job's bad event", "notify: {command: [x]}\n" + job + "    notify: {on: timeouts}\n",
			[]string{`c.yaml:6: job "j": notify.on[0]: unknown event "timeouts" (want failure, timeout, lost, missed, interrupted, recovery)`}},
		{"webhook timeout zero", "notify:\n  webhook: {url: \"https://h/x\", secret: k, timeout: 0s}\n" + job,
			[]string{`c.yaml:2: notify.webhook.timeout: 0s: want a duration above 0 (omit the key for the default 10s)`}},
		{"bad command", "notify: {command: page}\n" + job,
			[]string{`c.yaml:1: notify.command: want a list: the program and its arguments, e.g. ["/usr/local/bin/report", "--all"], got a string of 1 word`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			if got := AsErrors(err); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("a password in %v", err)
			}
		})
	}
}

// A job defined at run time may not carry the secret itself (the store
// and the dashboard keep its definition): it names a variable, which the
// delivering node reads.
func TestDefineNotifySecret(t *testing.T) {
	_, _, err := Define("body", []byte(`{"name": "j", "schedule": "@daily", "command": ["x"], "notify": {"webhook": {"url": "https://h/x", "secret": "k"}}}`), "")
	if err == nil || !strings.Contains(err.Error(), "notify.webhook.secret: not in a job defined at run time") || strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("inline secret: %v", err)
	}
	j, _, err := Define("body", []byte(`{"name": "j", "schedule": "@daily", "command": ["x"], "notify": {"webhook": {"url": "https://h/x", "secret_env": "UNSET_ON_THIS_HOST"}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if w := j.Notify.Webhook; w.SecretEnv != "UNSET_ON_THIS_HOST" || w.Secret != "" {
		t.Fatalf("webhook %+v", w)
	}
}
