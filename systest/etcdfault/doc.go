// Package etcdfault holds etcdstore's network-fault tests, run through a
// proxy (systest/internal/proxy) between a Store's client and etcd: a
// holder whose traffic is blackholed is told of the loss before its
// session could expire at etcd, and another client obtains the lock only
// after that (a mutex, a semaphore's permit, a read-write lock's writer);
// a lock's key that its Store could not delete at the lock's
// deadline, while cut off, is deleted as soon as the network is back.
//
// The tests are here, not beside etcdstore, because the proxy is toxiproxy
// used as a library: an import of it in etcdstore's tests would put
// toxiproxy, and what it pulls in, into the go.sum of every program that
// imports etcdstore (go mod tidy loads the tests of the packages a program
// imports). etcdstore's other fault tests — holder killed or paused, server
// restarted or down — stay beside it. Being outside the package, the tests
// use only etcdstore's exported API and the key layout it documents.
package etcdfault
