package testserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// extraBinDirs are searched after $PATH: Debian puts some server binaries in
// sbin directories that a non-root PATH may lack.
var extraBinDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Require returns the path of a server binary, or skips the test when it is
// missing — except when the environment has CI=true, where a missing binary
// fails the test (scripts/install-servers.sh installs them).
func Require(t testing.TB, binary string) string {
	t.Helper()
	if path, err := lookBinary(binary); err == nil {
		return path
	}
	msg := "testserver: " + binary + " not found in $PATH; run scripts/install-servers.sh"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func lookBinary(binary string) (string, error) {
	path, err := exec.LookPath(binary)
	if err == nil {
		return path, nil
	}
	if filepath.Base(binary) != binary {
		return "", err
	}
	for _, dir := range extraBinDirs {
		p := filepath.Join(dir, binary)
		if fi, serr := os.Stat(p); serr == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", err
}
