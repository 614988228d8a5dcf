// Package redisfault holds redisstore's network-fault tests: a holder cut
// off from Redis by a blackholing proxy (systest/internal/proxy) is told of
// the loss before its lease could end at the server, and another client
// obtains the lock only after that: a mutex, a read-write lock's writer, a
// semaphore's permit.
//
// The tests are here, not beside redisstore, because the proxy is
// toxiproxy used as a library: an import of it in redisstore's tests would
// put toxiproxy, and what it pulls in, into the go.sum of every program
// that imports redisstore (go mod tidy loads the tests of the packages a
// program imports). redisstore's other fault tests — holder killed or
// paused, server restarted, Sentinel failover — stay beside it. Being
// outside the package, these tests use only redisstore's exported API.
package redisfault
