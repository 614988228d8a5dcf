// Package pgfault holds pgstore's network-fault tests: a holder whose
// traffic to PostgreSQL is blackholed by a proxy (systest/internal/proxy)
// is told of the loss before its lease could end at the server, and
// another client obtains the lock only after that, in both modes: of a
// mutex, of a RWMutex's writer and of a Semaphore's permit.
//
// The test is here, not beside pgstore, because the proxy is toxiproxy
// used as a library: an import of it in pgstore's tests would put
// toxiproxy, and what it pulls in, into the go.sum of every program that
// imports pgstore (go mod tidy loads the tests of the packages a program
// imports). pgstore's other fault tests — holder killed or paused, server
// restarted — stay beside it. Being outside the package, the test uses
// only pgstore's exported API.
package pgfault
