package deploy

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// instruction is one instruction of a Dockerfile, its continuation lines
// joined.
type instruction struct {
	line int    // where it starts, from 1
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

// stage is the instructions from one FROM to the next.
type stage struct {
	from, name string // FROM's image and AS name
	ins        []instruction
}

// parseDockerfile splits a Dockerfile into its stages. It knows what the
// shipped file uses: comments, backslash continuations, FROM ... AS NAME.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var stages []stage
	var cur *instruction
	lines := strings.Split(text, "\n")
	flush := func() {
		if cur == nil {
			return
		}
		if cur.cmd == "FROM" {
			f := strings.Fields(cur.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		} else if len(stages) == 0 {
			t.Fatalf("Dockerfile:%d: %s before the first FROM", cur.line, cur.cmd)
		} else {
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, *cur)
		}
		cur = nil
	}
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if cur == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		more := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else if !strings.HasPrefix(trimmed, "#") {
			cur.args += " " + trimmed
		}
		if !more {
			flush()
		}
	}
	flush()
	return stages
}

// get returns the arguments of the last instruction cmd of s.
func (s stage) get(cmd string) (string, bool) {
	for i := len(s.ins) - 1; i >= 0; i-- {
		if s.ins[i].cmd == cmd {
			return s.ins[i].args, true
		}
	}
	return "", false
}

// execForm decodes a JSON array argument (CMD ["a", "b"]).
func execForm(t *testing.T, what, args string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(args), &v); err != nil || len(v) == 0 {
		t.Fatalf("%s %s: want the exec form, a JSON array (a scratch image has no shell): %v", what, args, err)
	}
	return v
}

// image is what the Dockerfile's last stage says about running it.
type image struct {
	final       stage
	user        string
	uid         int
	entrypoint  []string
	cmd         []string
	healthcheck []string // after CMD
	zoneinfo    string   // $ZONEINFO
}

// readImage parses the Dockerfile and checks what TestDockerfile's doc
// says; the other tests use what it returns.
func readImage(t *testing.T) image {
	t.Helper()
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: %d stages, want 2 (build, image)", len(stages))
	}
	build, final := stages[0], stages[1]

	// The build stage: a Go image at least as new as go.mod's go line,
	// running the static build.
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readFile(t, "go.mod"))
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if m := regexp.MustCompile(`^golang:(\d+\.\d+)[.-]`).FindStringSubmatch(build.from); m == nil || build.name != "build" {
		t.Errorf("Dockerfile: first stage FROM %s AS %s, want golang:X.Y-... AS build", build.from, build.name)
	} else if !goAtLeast(m[1], goLine[1]) {
		t.Errorf("Dockerfile: the build stage's Go %s is older than go.mod's go %s", m[1], goLine[1])
	}
	built := false
	for _, in := range build.ins {
		if in.cmd == "RUN" && strings.Contains(in.args, staticBuild) {
			built = true
		}
	}
	if !built {
		t.Errorf("Dockerfile: no RUN of %s in the build stage (TestMain builds what it says)", staticBuild)
	}

	// The image.
	im := image{final: final}
	if final.from != "scratch" {
		t.Errorf("Dockerfile: the image is FROM %s, want scratch", final.from)
	}
	im.user, _ = final.get("USER")
	uid, err := strconv.Atoi(strings.SplitN(im.user, ":", 2)[0])
	if err != nil || uid == 0 {
		t.Errorf("Dockerfile: USER %q, want a numeric uid other than 0 (Kubernetes' runAsNonRoot can check only a number)", im.user)
	}
	im.uid = uid
	ep, _ := final.get("ENTRYPOINT")
	im.entrypoint = execForm(t, "ENTRYPOINT", ep)
	cmd, _ := final.get("CMD")
	im.cmd = execForm(t, "CMD", cmd)
	hc, ok := final.get("HEALTHCHECK")
	if !ok {
		t.Fatal("Dockerfile: no HEALTHCHECK in the image")
	}
	opts, hcCmd, ok := strings.Cut(hc, "CMD ")
	if !ok {
		t.Fatalf("Dockerfile: HEALTHCHECK %s has no CMD", hc)
	}
	im.healthcheck = execForm(t, "HEALTHCHECK CMD", hcCmd)
	if !strings.Contains(opts, "--timeout=") || !strings.Contains(opts, "--interval=") {
		t.Errorf("Dockerfile: HEALTHCHECK %s: set --interval and --timeout", opts)
	}
	if len(im.entrypoint) != 1 || im.healthcheck[0] != im.entrypoint[0] || len(im.healthcheck) < 2 || im.healthcheck[1] != "health" {
		t.Errorf("Dockerfile: ENTRYPOINT %q and HEALTHCHECK %q: want the binary, and its health command", im.entrypoint, im.healthcheck)
	}
	if env, _ := final.get("ENV"); strings.HasPrefix(env, "ZONEINFO=") {
		im.zoneinfo = strings.TrimPrefix(env, "ZONEINFO=")
	}
	return im
}

// goAtLeast compares Go versions "1.25" and "1.24".
func goAtLeast(v, min string) bool {
	num := func(s string) (int, int) {
		a, b, _ := strings.Cut(s, ".")
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x, y
	}
	a, b := num(v)
	c, d := num(min)
	return a > c || a == c && b >= d
}

// copies lists the image's COPY --from=build SRC DST pairs, and the
// --chown of each ("" without).
type copyFrom struct{ src, dst, chown string }

func (im image) copies(t *testing.T) []copyFrom {
	t.Helper()
	var out []copyFrom
	for _, in := range im.final.ins {
		if in.cmd != "COPY" {
			continue
		}
		var c copyFrom
		var rest []string
		from := ""
		for _, f := range strings.Fields(in.args) {
			switch {
			case strings.HasPrefix(f, "--from="):
				from = strings.TrimPrefix(f, "--from=")
			case strings.HasPrefix(f, "--chown="):
				c.chown = strings.TrimPrefix(f, "--chown=")
			default:
				rest = append(rest, f)
			}
		}
		if from != "build" || len(rest) != 2 {
			t.Fatalf("Dockerfile:%d: COPY %s: want COPY --from=build SRC DST", in.line, in.args)
		}
		c.src, c.dst = rest[0], rest[1]
		out = append(out, c)
	}
	return out
}

// TestDockerfile: the Dockerfile builds the binary TestMain built, into an
// image FROM scratch that runs it as a user other than root, with a
// health check that is the binary's own probe of the address its command
// serves on, with the zone database and CA certificates it needs.
func TestDockerfile(t *testing.T) {
	im := readImage(t)
	if len(im.cmd) == 0 || im.cmd[0] != "serve" {
		t.Fatalf("Dockerfile: CMD %q, want serve", im.cmd)
	}
	httpAddr := flagValue(im.cmd, "--http")
	if httpAddr == "" || !strings.HasPrefix(httpAddr, "0.0.0.0:") {
		t.Errorf("Dockerfile: CMD %q: want --http 0.0.0.0:PORT, the container's every address", im.cmd)
	}
	if hc := flagValue(im.healthcheck, "--http"); hc != httpAddr {
		t.Errorf("Dockerfile: HEALTHCHECK asks %q, CMD serves on %q", hc, httpAddr)
	}
	if expose, _ := im.final.get("EXPOSE"); !strings.HasSuffix(httpAddr, ":"+expose) {
		t.Errorf("Dockerfile: EXPOSE %s, CMD serves on %s", expose, httpAddr)
	}
	dsts := map[string]copyFrom{}
	for _, c := range im.copies(t) {
		dsts[c.dst] = c
	}
	if _, ok := dsts[im.entrypoint[0]]; !ok {
		t.Errorf("Dockerfile: ENTRYPOINT %s is not copied from the build stage", im.entrypoint[0])
	}
	if _, ok := dsts[im.zoneinfo]; !ok || im.zoneinfo == "" {
		t.Errorf("Dockerfile: ZONEINFO=%q is not copied from the build stage (jobs with timezone: need it)", im.zoneinfo)
	}
	if _, ok := dsts["/etc/ssl/certs/ca-certificates.crt"]; !ok {
		t.Error("Dockerfile: no CA certificates (rediss://, etcds:// and https jobs need them)")
	}
	wd, _ := im.final.get("WORKDIR")
	if c, ok := dsts[wd]; !ok || !strings.HasPrefix(c.chown, strconv.Itoa(im.uid)+":") {
		t.Errorf("Dockerfile: WORKDIR %s is not copied --chown to the image's user %d (serve's default SQLite store is there)", wd, im.uid)
	}
	// The binary accepts the image's command lines.
	run(t, tasklockBin, "help", "serve")
	if out := run(t, tasklockBin, append([]string{"help"}, im.healthcheck[1])...); !strings.Contains(out, "--http") {
		t.Errorf("tasklock help %s does not describe --http:\n%s", im.healthcheck[1], out)
	}
	dockerignore := readFile(t, ".dockerignore")
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "dashboard"} {
		if regexp.MustCompile(`(?m)^/?` + regexp.QuoteMeta(keep) + `/?$`).MatchString(dockerignore) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", keep)
		}
	}
}

// flagValue is the value after flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
