package redlock

import (
	"fmt"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// Kinds implements driver.Kinder: the Store keeps mutexes only. For every
// other mode it returns an error wrapping driver.ErrUnsupported that says
// why (see the package documentation, Read-write locks, semaphores and
// fair locks), so that RWMutex and Semaphore fail at once.
func (s *Store) Kinds(m driver.Mode) error {
	if m == driver.ModeMutex {
		return nil
	}
	return kindsError(m)
}

// kindsError is the error for a hold of mode m.
func kindsError(m driver.Mode) error {
	return fmt.Errorf("redlock: %v holds: %w: a majority vote per permit or reader across independent nodes "+
		"cannot keep a count of holders or a writer's claim consistent without consensus (each node counts only "+
		"the holders it saw)", m, driver.ErrUnsupported)
}

// withoutKinds runs fn on the items of ps that are mutexes (mode tells an
// item's mode) and gives every other item kindsError: the Locker never
// sends those, as Kinds refuses them, but another caller gets an answer.
// fn's results are put back in place; its error fails the whole call.
func withoutKinds[P any](ps []P, mode func(P) driver.Mode, fn func([]P) ([]error, error)) ([]error, error) {
	mutexes := make([]P, 0, len(ps))
	idx := make([]int, 0, len(ps))
	out := make([]error, len(ps))
	for j, p := range ps {
		if m := mode(p); m != driver.ModeMutex {
			out[j] = kindsError(m)
			continue
		}
		mutexes = append(mutexes, p)
		idx = append(idx, j)
	}
	if len(mutexes) == 0 {
		return out, nil
	}
	res, err := fn(mutexes)
	if err != nil {
		return nil, err
	}
	for k, j := range idx {
		out[j] = res[k]
	}
	return out, nil
}

// hasKinds reports whether any item of ps is not a mutex.
func hasKinds[P any](ps []P, mode func(P) driver.Mode) bool {
	for _, p := range ps {
		if mode(p) != driver.ModeMutex {
			return true
		}
	}
	return false
}

func renewMode(p driver.RenewParams) driver.Mode     { return p.Mode }
func releaseMode(p driver.ReleaseParams) driver.Mode { return p.Mode }
