//go:build unix

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/schedule"
)

// --output-max replaces the file's output_max:; bad sizes are usage errors.
func TestServeOutputMaxFlag(t *testing.T) {
	env := func(string) string { return "" }
	c, err := parseServe([]string{"--config", "x", "--output-max", "128KiB"}, env)
	if err != nil {
		t.Fatal(err)
	}
	f := &config.File{OutputMax: config.DefaultOutputMax}
	c.apply(f)
	if f.OutputMax != 128<<10 {
		t.Errorf("--output-max 128KiB: OutputMax %d", f.OutputMax)
	}
	c, _ = parseServe([]string{"--config", "x"}, env)
	f = &config.File{OutputMax: 1000}
	c.apply(f)
	if f.OutputMax != 1000 {
		t.Errorf("without --output-max: OutputMax %d, want the file's 1000", f.OutputMax)
	}
	for _, v := range []string{"2MiB", "x", "-5"} {
		if _, err := parseServe([]string{"--config", "x", "--output-max", v}, env); err == nil || !strings.Contains(err.Error(), "output-max") {
			t.Errorf("--output-max %s: %v, want an error naming the flag", v, err)
		}
	}
}

// A job's page shows what it runs, with no secret: not a URL's password or
// token, nor a secret header's value, nor a secret in the command line.
func TestJobHandlerFieldsRedacted(t *testing.T) {
	const pw, tok = "s3cret-pw-123", "tok-abcdef-987"
	hide := newRedactor(tok)
	cmdJob := config.Job{Job: schedule.Job{Name: "c"}, Command: []string{"/bin/report", "--all", "two words", "--api-token=" + tok}}
	got := jobHandlerFields(cmdJob, hide)
	want := []dashboard.DefField{{Key: "command", Value: `/bin/report --all "two words" --api-token=xxxxx`}, {Key: "kill_grace", Value: "2s"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("command job: %+v, want %+v", got, want)
	}
	httpJob := config.Job{Job: schedule.Job{Name: "h"}, HTTP: &config.HTTP{Method: "POST", URL: "https://u:" + pw + "@hooks.example/run?token=" + tok + "&x=1",
		Headers: map[string]string{"Authorization": "Bearer " + tok, "X-Api-Key": "k-" + pw, "Accept": "text/plain"}, Body: `{"a":1}`, Timeout: 5 * time.Second}}
	got = jobHandlerFields(httpJob, hide)
	var all []string
	for _, f := range got {
		all = append(all, f.Key+"="+f.Value)
	}
	s := strings.Join(all, "\n")
	if strings.Contains(s, pw) || strings.Contains(s, tok) {
		t.Errorf("a secret shows:\n%s", s)
	}
	for _, w := range []string{"http=POST https://u:xxxxx@hooks.example/run?", "header Accept=text/plain", "header Authorization=xxxxx", "header X-Api-Key=xxxxx", "body=7 bytes", "http timeout=5s"} {
		if !strings.Contains(s, w) {
			t.Errorf("want %q in\n%s", w, s)
		}
	}
}
