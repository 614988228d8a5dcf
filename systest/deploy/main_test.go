package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the library module's directory, which holds the files
// checked here.
const repoRoot = "../.."

// staticBuild is the build of the Dockerfile's build stage; TestMain runs
// it (with -o into a temporary directory) and TestDockerfile checks that
// the Dockerfile still says it.
const staticBuild = `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/tasklock ./cmd/tasklock`

// tasklockBin is the static tasklock binary TestMain builds.
var tasklockBin string

// TestMain builds the binary once, as the Dockerfile does, in the
// library's module (its go.mod, not this module's, picks the versions).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tasklock-deploy")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tasklockBin = filepath.Join(dir, "tasklock")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tasklockBin, "./cmd/tasklock")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "CGO_ENABLED=0 go build ./cmd/tasklock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// The directory is the image's stand-in: the by-hand test runs the
	// binary as another user, who must be able to reach it.
	_ = os.Chmod(dir, 0o755)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// require returns the path of tool, or skips the test when it is missing
// — failing it instead under CI=true, where scripts/install-servers.sh
// has installed it.
func require(t *testing.T, tool string) string {
	t.Helper()
	if p, err := exec.LookPath(tool); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if p := filepath.Join(dir, tool); isExecutable(p) {
			return p
		}
	}
	msg := tool + " not found; run scripts/install-servers.sh deploy"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// run runs name with args and returns its combined output, failing the
// test when it exits non-zero.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// readFile reads a file of the repository.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
