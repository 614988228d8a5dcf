//go:build unix

package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// redisWithPassword starts a Redis server with a user "app" whose password
// is password, and returns a store URL for it that holds the password.
func redisWithPassword(t *testing.T, password string) string {
	t.Helper()
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.Do(context.Background(), "ACL", "SETUSER", "app", "on", ">"+password, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	return "redis://app:" + password + "@" + srv.Addr()
}

// COMMAND gets none of tasklock's variables but those exec sets for it.
func TestExecChildEnvHasNoSecrets(t *testing.T) {
	t.Parallel()
	const password, token = "Pw-of-the-store-4711", "dashboard-token-0815"
	store := redisWithPassword(t, password)
	code, out, errOut := tl.Run(t, []string{"TASKLOCK_STORE=" + store, "TASKLOCK_TOKEN=" + token, "TASKLOCK_OTHER=x", "KEPT=yes"},
		"exec", "--key", "envk", "--", "env")
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	for _, want := range []string{"KEPT=yes\n", "TASKLOCK_KEY=envk\n", "TASKLOCK_FENCE=", "TASKLOCK_OWNER=", "TASKLOCK_MODE=mutex\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("COMMAND's environment lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{password, token, "TASKLOCK_STORE=", "TASKLOCK_TOKEN=", "TASKLOCK_OTHER="} {
		if strings.Contains(out, bad) {
			t.Errorf("COMMAND's environment holds %q:\n%s", bad, out)
		}
	}
}

// A job that prints its environment puts neither the dashboard token nor
// the store's password into the run history (which GET /api/runs serves
// without a token) or serve's output: TASKLOCK_* variables are not passed
// on, and what the job prints otherwise is redacted.
func TestServeJobSecretsNotInHistory(t *testing.T) {
	t.Parallel()
	const password, token = "Pw-of-the-store-4711", "dashboard-token-0815"
	store := redisWithPassword(t, password)
	cfg := writeConfig(t, t.TempDir(), "store: "+store+"\nnode: sec-node\njobs:\n"+`  - name: printenv
    schedule: "@every 1s"
    command: ["sh", "-c", "env; exit 3"]
`)
	p := tl.Start(t, []string{"TASKLOCK_TOKEN=" + token, "TASKLOCK_STORE=" + store,
		"TOKEN_COPY=" + token, "PASSWORD_COPY=" + password, "URL_COPY=" + store}, "serve", "--config", cfg, "--http", "")
	var history string
	clitest.WaitFor(t, 20*time.Second, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("serve exited (%v)\nstderr:\n%s", p.State(), p.Stderr())
		default:
		}
		code, out, _ := tl.Run(t, []string{"TASKLOCK_STORE=" + store}, "jobs", "history", "--job", "printenv", "--json")
		history = out
		return code == 0 && strings.Contains(out, "TASKLOCK_JOB=printenv")
	}, "a run of printenv in the history")
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, p.Stderr())
	}
	for _, want := range []string{"TOKEN_COPY=xxxxx", "PASSWORD_COPY=xxxxx", "command exited with status 3"} {
		if !strings.Contains(history, want) {
			t.Errorf("history lacks %q:\n%s", want, history)
		}
	}
	for what, text := range map[string]string{"history": history, "serve's stdout": p.Stdout(), "serve's stderr": p.Stderr()} {
		for _, bad := range []string{password, token, "TASKLOCK_TOKEN=", "TASKLOCK_STORE="} {
			if strings.Contains(text, bad) {
				t.Errorf("%s holds %q:\n%s", what, bad, text)
			}
		}
	}
}
