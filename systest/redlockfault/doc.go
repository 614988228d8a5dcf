// Package redlockfault holds redlock's network-fault tests, run through a
// proxy per node (systest/internal/proxy) that blackholes or delays the
// traffic to that node: a holder cut off from one node keeps its lock, one
// cut off from two loses it in time, a node restarts while the holder
// cannot reach a third, fences keep increasing while the majority shifts
// from node to node, and grants that come after Acquire gave up on them are
// undone.
//
// The tests are here, not beside redlock, because the proxy is toxiproxy
// used as a library: an import of it in redlock's tests would put
// toxiproxy, and what it pulls in, into the go.sum of every program that
// imports redlock (go mod tidy loads the tests of the packages a program
// imports). redlock's other fault tests — holder killed or paused, nodes
// down — stay beside it. Being outside the package, these tests use only
// the exported API of redlock and the key layout redisstore documents.
package redlockfault
