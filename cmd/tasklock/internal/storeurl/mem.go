package storeurl

import (
	"context"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

// memOpener opens a fresh in-process memstore.
type memOpener struct{}

// parseMem checks a mem:// URL, which takes no hosts, path or parameters.
// Every Open of mem:// returns a new, empty store: it coordinates the
// goroutines of one process only.
func parseMem(u *storeURL) (opener, error) {
	if u.hostPart != "" || u.path != "" || u.user != "" || u.hasPassword {
		return nil, u.badf("mem:// takes no host, user or path")
	}
	return memOpener{}, nil
}

func (memOpener) open(ctx context.Context) (driver.Store, func() error, error) {
	return memstore.New(nil), func() error { return nil }, nil
}
