//go:build !linux

package mysqlstore

// setUserTimeout does nothing: TCP_USER_TIMEOUT is Linux's.
func setUserTimeout(fd uintptr, ms int) error { return nil }
