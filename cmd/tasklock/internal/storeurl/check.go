package storeurl

import (
	"github.com/tasklock/tasklock/mysqlstore"
	"github.com/tasklock/tasklock/pgstore"
)

// Check reports whether rawURL is a store URL Open would accept, without
// connecting: the scheme, hosts, path and query parameters. Its errors wrap
// ErrBadURL and show the URL only in its redact.URL form.
func Check(rawURL string) error {
	_, _, err := parse(rawURL)
	return err
}

// PlainOnly returns, without connecting, why the store rawURL names keeps
// plain locks only, no read-write lock or semaphore: "redlock://" or
// "mode=connection"; "" when it keeps every kind, or when rawURL is not a
// store URL Open would accept (Open says why).
func PlainOnly(rawURL string) string {
	o, _, err := parse(rawURL)
	if err != nil {
		return ""
	}
	switch c := o.(type) {
	case *redlockConfig:
		return "redlock://"
	case *pgConfig:
		if c.store.Mode == pgstore.ModeConnection {
			return "mode=connection"
		}
	case *mysqlConfig:
		if c.store.Mode == mysqlstore.ModeConnection {
			return "mode=connection"
		}
	}
	return ""
}
