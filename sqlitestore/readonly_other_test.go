//go:build !linux

package sqlitestore

import (
	"os"
	"testing"
)

// makeReadOnly makes dir refuse new files until the test ends (mode 0555).
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() == 0 {
		t.Skip("running as root: permissions do not make a directory read-only")
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
}
