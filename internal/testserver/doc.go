// Package testserver starts real servers for tests and injects faults into
// them and into the processes that talk to them.
//
// Every server runs from the machine's own binaries, listens on a free
// 127.0.0.1 port, keeps its files in a t.TempDir and is killed, with its whole
// process group, when the test ends. Children are also started with a parent
// death signal (Linux), so nothing outlives a test binary that dies.
// Readiness is polled against the server itself (PING, INFO, CLUSTER INFO)
// with a deadline; nothing waits by sleeping.
//
// # Servers
//
//   - [StartRedis]: one redis-server without persistence, with
//     [Redis.Kill], [Redis.Restart] (same port and directory),
//     [Redis.Stop] and [Redis.Cont].
//   - [StartSentinel]: a master, a replica and three sentinels watching
//     them; [Sentinel.Failover] forces a failover and waits for it to finish.
//   - [StartCluster]: three Redis Cluster masters with all slots assigned.
//   - [StartPostgres] (shared per test binary, a fresh database per test
//     with [Postgres.CreateDB]) and [StartPostgresPrivate] for tests that
//     restart or kill the server.
//   - [SharedMariaDB] and [StartMariaDB], likewise.
//   - [StartEtcd]: one etcd member with short heartbeats.
//   - [SharedZooKeeper] and [StartZooKeeper]: a standalone ZooKeeper with a
//     short tick, TTL nodes and the four-letter words enabled.
//
// Shared servers are stopped by [Main], which every package that uses one
// calls from its TestMain.
//
// A missing binary skips the test, except under CI=true where it fails it:
// see [Require] and scripts/install-servers.sh.
//
// # Network faults
//
// The proxy that blackholes or delays a connection lives in the systest
// module (systest/internal/proxy): it embeds toxiproxy, which the library's
// module must not require.
//
// # Helper processes
//
// To SIGKILL or SIGSTOP a real lock holder, a test re-executes its own test
// binary as a helper with [StartHelper]. The test function checks
// [HelperRole] first and, when it is not empty, plays that role and exits:
//
//	func TestHolderKilled(t *testing.T) {
//		if role := testserver.HelperRole(); role != "" {
//			runHolder(role) // prints "LOCKED <fence>", then works until killed
//			os.Exit(0)
//		}
//		h := testserver.StartHelper(t, "TestHolderKilled", "holder", "ADDR="+addr)
//		h.WaitLine(t, "LOCKED ", 10*time.Second)
//		h.Kill(t)
//		// ... the next holder must get the lock within TTL + 1s
//	}
//
// This package is for tests only; it is internal so that no library package
// has to import package testing.
package testserver
