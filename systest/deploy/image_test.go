package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// testToken is the dashboard token the image's serve gets; 0.0.0.0 needs
// one.
const testToken = "deploy-test-token"

// testConfig is serve's configuration file in the tests' images: the
// default store, a SQLite file in the working directory.
const testConfig = "jobs:\n  - name: tick\n    schedule: '@every 1s'\n    command: [/tasklock, version]\n"

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// procUID is the real uid of process pid, from /proc.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no Uid line in /proc/%d/status", pid)
	}
	uid, _ := strconv.Atoi(string(m[1]))
	return uid
}

// openDirs makes dir and its parents up to the temporary directory
// searchable by everyone, so that another user can reach what is in it.
func openDirs(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// onPort replaces the port of every 0.0.0.0:PORT argument.
func onPort(args []string, port string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "0.0.0.0:") {
			a = "0.0.0.0:" + port
		}
		out[i] = a
	}
	return out
}

// TestImageByHand runs the image's command and health check as the image
// would, without a container engine: the static binary, with the image's
// arguments (the paths under a temporary root), in its working directory,
// as its user (when the test runs as root), with only its environment.
// serve becomes healthy and ready, runs as that uid, and stops cleanly.
func TestImageByHand(t *testing.T) {
	im := readImage(t)
	root := t.TempDir()
	openDirs(t, root)
	port := freePort(t)
	wd, _ := im.final.get("WORKDIR")
	for _, d := range []string{wd, "/etc/tasklock"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/tasklock/tasklock.yaml"), []byte(strings.ReplaceAll(testConfig, "/tasklock", tasklockBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	rooted := func(args []string) []string {
		out := onPort(args, port)
		for i, a := range out {
			if strings.HasPrefix(a, "/etc/tasklock/") {
				out[i] = filepath.Join(root, a)
			}
		}
		return out
	}
	serve := exec.Command(tasklockBin, rooted(im.cmd)...)
	serve.Dir = filepath.Join(root, wd)
	serve.Env = []string{"TASKLOCK_TOKEN=" + testToken, "ZONEINFO=" + filepath.Join(goroot(t), "lib/time/zoneinfo.zip")}
	asRoot := os.Geteuid() == 0
	if asRoot {
		if err := os.Chown(serve.Dir, im.uid, im.uid); err != nil {
			t.Fatal(err)
		}
		serve.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(im.uid), Gid: uint32(im.uid)}}
	} else {
		t.Logf("not root: serve runs as uid %d, not the image's %d", os.Getuid(), im.uid)
	}
	var log lockedBuffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once serve has exited, waitErr set
	var waitErr error
	go func() { waitErr = serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = serve.Process.Kill()
		<-exited
	})
	probe := func(extra ...string) (string, error) {
		out, err := exec.Command(tasklockBin, append(rooted(im.healthcheck[1:]), extra...)...).CombinedOutput()
		return string(out), err
	}
	clitest.WaitFor(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("serve exited (%v) before it was healthy:\n%s", waitErr, log.String())
		default:
		}
		_, err := probe()
		return err == nil
	}, "the HEALTHCHECK command to pass")
	if out, err := probe("--ready"); err != nil || !strings.Contains(out, `"ready":true`) {
		t.Errorf("health --ready: %v\n%s", err, out)
	}
	if asRoot {
		if uid := procUID(t, serve.Process.Pid); uid != im.uid {
			t.Errorf("serve runs as uid %d, want the image's %d", uid, im.uid)
		}
	}
	if _, err := os.Stat(filepath.Join(serve.Dir, "tasklock.db")); err != nil {
		t.Errorf("no SQLite store in the working directory: %v", err)
	}
	_ = serve.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("serve after SIGTERM: %v, want exit 0\n%s", waitErr, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit within 30s of SIGTERM\n%s", log.String())
	}
}

// lockedBuffer collects a process's output while a test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// goroot is the Go installation's root, whose lib/time/zoneinfo.zip the
// image copies.
func goroot(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, "go", "env", "GOROOT"))
}

// TestImageWithPodman builds the Dockerfile's image stage with podman and
// runs it. The build stage's golang image cannot be pulled where there is
// no registry, so its output is made here: the binary TestMain built, the
// zone database of this Go, this host's CA certificates, the empty
// directories. The image runs with a read-only root file system and no
// network but loopback: podman's health check (the image's HEALTHCHECK)
// passes, readiness too, serve runs as the image's uid and stops cleanly
// on podman stop.
func TestImageWithPodman(t *testing.T) {
	podman := require(t, "podman")
	im := readImage(t)
	ctxDir := t.TempDir()
	sources := map[string]string{
		"/out/tasklock":                       tasklockBin,
		"/usr/local/go/lib/time/zoneinfo.zip": filepath.Join(goroot(t), "lib/time/zoneinfo.zip"),
		"/etc/ssl/certs/ca-certificates.crt":  "/etc/ssl/certs/ca-certificates.crt",
	}
	var file strings.Builder
	fmt.Fprintf(&file, "FROM %s\n", im.final.from)
	copies := im.copies(t)
	ci := 0
	for _, in := range im.final.ins {
		if in.cmd != "COPY" {
			fmt.Fprintf(&file, "%s %s\n", in.cmd, in.args)
			continue
		}
		c := copies[ci]
		ci++
		local := filepath.Join(ctxDir, "build", c.src)
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			t.Fatal(err)
		}
		if src, ok := sources[c.src]; ok {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatalf("the image copies %s from the build stage: %v", c.src, err)
			}
			if err := os.WriteFile(local, b, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if strings.HasPrefix(c.src, "/out/") && filepath.Ext(c.src) == "" {
			if err := os.MkdirAll(local, 0o755); err != nil { // a directory the build stage makes
				t.Fatal(err)
			}
		} else {
			t.Fatalf("the image copies %s from the build stage, which this test cannot make", c.src)
		}
		chown := ""
		if c.chown != "" {
			chown = "--chown=" + c.chown + " "
		}
		fmt.Fprintf(&file, "COPY %s%s %s\n", chown, filepath.Join("build", c.src), c.dst)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Containerfile"), []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("localhost/tasklock-deploy-test:%d", os.Getpid())
	run(t, podman, "build", "--quiet", "--format", "docker", "-t", tag, "-f", filepath.Join(ctxDir, "Containerfile"), ctxDir)
	t.Cleanup(func() { _ = exec.Command(podman, "rmi", "-f", tag).Run() })
	inspect := run(t, podman, "image", "inspect", "--format", "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .HealthCheck}}", tag)
	if !strings.HasPrefix(inspect, im.user+"|") || !strings.Contains(inspect, `"/tasklock","health"`) {
		t.Errorf("podman image inspect: %s; want user %s and the health check", inspect, im.user)
	}

	cfgDir, stateDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "tasklock.yaml"), []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(stateDir, im.uid, im.uid); err != nil {
			t.Fatal(err)
		}
	}
	wd, _ := im.final.get("WORKDIR")
	name := fmt.Sprintf("tasklock-deploy-test-%d", os.Getpid())
	args := []string{}
	if _, err := exec.LookPath("runc"); err == nil {
		// crun refuses the hybrid cgroup layout of some machines.
		args = append(args, "--runtime", "runc")
	}
	args = append(args, "run", "-d", "--name", name,
		// podman's default limits exceed the hard limits some machines
		// allow a container to set.
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--network", "none", "--read-only",
		"-e", "TASKLOCK_TOKEN="+testToken,
		"-v", cfgDir+":/etc/tasklock:ro", "-v", stateDir+":"+wd,
		tag)
	run(t, podman, args...)
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "-t", "0", name).Run() })
	logs := func() string {
		out, _ := exec.Command(podman, "logs", name).CombinedOutput()
		return string(out)
	}
	clitest.WaitFor(t, 60*time.Second, func() bool {
		if st := strings.TrimSpace(run(t, podman, "inspect", "--format", "{{.State.Status}}", name)); st != "running" {
			t.Fatalf("the container is %s:\n%s", st, logs())
		}
		return exec.Command(podman, "healthcheck", "run", name).Run() == nil
	}, "podman healthcheck run to pass")
	if out := run(t, podman, "exec", name, im.entrypoint[0], "health", "--ready", "--http", flagValue(im.healthcheck, "--http")); !strings.Contains(out, `"ready":true`) {
		t.Errorf("health --ready in the container: %s", out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(run(t, podman, "inspect", "--format", "{{.State.Pid}}", name)))
	if err != nil {
		t.Fatal(err)
	}
	if uid := procUID(t, pid); uid != im.uid {
		t.Errorf("serve in the container runs as uid %d, want %d", uid, im.uid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, podman, "stop", "-t", "30", name).CombinedOutput(); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	if code := strings.TrimSpace(run(t, podman, "inspect", "--format", "{{.State.ExitCode}}", name)); code != "0" {
		t.Errorf("serve exited %s after podman stop, want 0\n%s", code, logs())
	}
}
