// Package mysqlfault holds mysqlstore's network-fault tests: a holder whose
// traffic to MySQL/MariaDB is blackholed by a proxy
// (systest/internal/proxy) is told of the loss while the database still
// considers the lock its own, and another client obtains it only
// afterwards, in both modes; and so is the holder of a semaphore's permit,
// in lease mode, without more permits believed held than the semaphore
// has.
//
// The test is here, not beside mysqlstore, because the proxy is toxiproxy
// used as a library: an import of it in mysqlstore's tests would put
// toxiproxy, and what it pulls in, into the go.sum of every program that
// imports mysqlstore (go mod tidy loads the tests of the packages a
// program imports). mysqlstore's other fault tests — holder killed or
// paused, server restarted — stay beside it. Being outside the package,
// the test uses only mysqlstore's exported API.
package mysqlfault
