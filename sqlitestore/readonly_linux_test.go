//go:build linux

package sqlitestore

import (
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// ioctls and the flag of chattr +i (linux/fs.h).
const (
	fsIocGetFlags  = 0x80086601
	fsIocSetFlags  = 0x40086602
	fsImmutableFlg = 0x10
)

// makeReadOnly makes dir refuse new files until the test ends: mode 0555,
// and, for root (which permissions do not stop), the immutable flag.
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	if os.Geteuid() != 0 {
		return
	}
	if err := setFlags(dir, func(f int32) int32 { return f | fsImmutableFlg }); err != nil {
		t.Skipf("running as root and cannot make %s immutable (%v): no way to make a directory read-only here", dir, err)
	}
	t.Cleanup(func() {
		if err := setFlags(dir, func(f int32) int32 { return f &^ fsImmutableFlg }); err != nil {
			t.Errorf("clearing the immutable flag of %s: %v", dir, err)
		}
	})
}

func setFlags(dir string, change func(int32) int32) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	var flags int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocGetFlags, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		return errno
	}
	flags = change(flags)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocSetFlags, uintptr(unsafe.Pointer(&flags))); errno != 0 {
		return errno
	}
	return nil
}
