// Package redistest gives tests a real Redis: one server (Start), a
// cluster (StartCluster) or a master and its replica watched by three
// sentinels (StartSentinel), each on free loopback ports, in temporary
// directories, without persistence (--save "" --appendonly no), and
// stopped when the test ends, with the servers' output logged when it
// failed.
//
// The binaries are redis-server and redis-cli from PATH (Debian's
// redis-server package, which `.ci/run` installs when it is missing). When
// PATH lacks them, FindBinaries fetches Debian's redis-server and
// redis-tools packages, and those of their libraries the machine lacks,
// with `apt-get download` (no root needed), and extracts them with
// `dpkg -x` into .cache/redis/debian/ at the repository root, once. A
// test that needs Redis and cannot get it fails with the reason; none
// skips. Options.Flavor = Valkey runs valkey-server and valkey-cli the
// same way, from PATH or from Debian's backports suite into
// .cache/valkey/debian/.
//
// A Server serves on one port: plain, or TLS only with a client
// certificate required (Options.TLS, certificates from testutil.NewPKI),
// with a password or an ACL user (Options.Password, Options.User). For
// fault tests it stops and starts again on the same port (Stop, Kill,
// Start), freezes (Freeze: SIGSTOP) and thaws (Thaw: SIGCONT), and gives
// its Pid for its memory. Do sends one command over a minimal RESP2
// connection of the harness's own (Conn), not a client library;
// CommandStats reads INFO commandstats to count round trips; CLI runs
// redis-cli on it.
//
// A Cluster's nodes run with --cluster-enabled yes, a cluster bus on a
// free port of its own (--cluster-port) and a cluster-node-timeout of one
// second, and are joined by `redis-cli
// --cluster create`; StartCluster returns once every node says
// cluster_state:ok with every slot covered. Failover hands a master's
// slots to its replica (CLUSTER FAILOVER); KillMaster kills a master and
// waits for the automatic promotion of its replica.
//
// A Sentinel is one master, one replica and three sentinels (redis-server
// --sentinel) watching the master under MasterName; Failover forces a
// failover (SENTINEL FAILOVER) and waits until every sentinel names the
// new master.
//
// Servers, clusters and sentinels are safe for concurrent use by the
// code under test; the calls that stop, start, freeze or fail over must
// come from the test's goroutine and not race with each other.
package redistest
