// Package zkfault holds zkstore's network-fault tests, run through a proxy
// (systest/internal/proxy) between a Store's Conn and ZooKeeper: a holder
// whose traffic is blackholed is told of the loss before its session could
// expire at the server, and another client obtains the lock only after
// that; an Acquire abandoned while the server answers late returns at once
// and its late grant is given back; once the client learns that its
// session expired behind a blackhole, that session's leases are not held
// any more, without a request.
//
// The tests are here, not beside zkstore, because the proxy is toxiproxy
// used as a library: an import of it in zkstore's tests would put
// toxiproxy, and what it pulls in, into the go.sum of every program that
// imports zkstore (go mod tidy loads the tests of the packages a program
// imports). zkstore's other fault tests — holder killed or paused, server
// killed, stopped or restarted, and a queue entry left while the network
// is cut (which checks the Store's reaper from inside) — stay beside it.
// Being outside the package, these tests use only zkstore's exported API
// and the node layout it documents.
package zkfault
