package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelMaster is the name the sentinels monitor the master under.
const sentinelMaster = "mymaster"

// sentinelTimeout bounds waiting for sentinels to agree (discovery, failover).
const sentinelTimeout = 30 * time.Second

// Sentinel is a Redis Sentinel deployment: one master, one replica and three
// sentinels (quorum 2, down-after-milliseconds 1000, failover-timeout 3000)
// monitoring the master as "mymaster", all on loopback.
type Sentinel struct {
	nodes     []*Redis // nodes[0] started as master, nodes[1] as its replica
	sentinels []*Redis
}

// StartSentinel starts a master, a replica of it and three sentinels
// (redis-server --sentinel, so no separate redis-sentinel binary is needed),
// and waits until every sentinel sees the master, the replica and the other
// two sentinels. Everything is killed at t.Cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := Require(t, "redis-server")
	master := StartRedis(t)
	replica := StartRedis(t, WithRedisArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.ports[0])))
	s := &Sentinel{nodes: []*Redis{master, replica}}

	// Sentinels learn replicas from the master's INFO, which they re-read
	// only every 10 s: make sure the replica is attached before they start.
	err := poll(startTimeout, func() error {
		info, err := respInfo(master.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if info["connected_slaves"] != "1" || !strings.Contains(info["slave0"], "state=online") {
			return fmt.Errorf("master %s: connected_slaves=%s slave0=%q", master.Addr(), info["connected_slaves"], info["slave0"])
		}
		rinfo, err := respInfo(replica.Addr(), "INFO", "replication")
		if err != nil {
			return err
		}
		if rinfo["master_link_status"] != "up" {
			return fmt.Errorf("replica %s: master_link_status=%s", replica.Addr(), rinfo["master_link_status"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testserver: replica did not sync: %v%s", err, replica.process().logTail())
	}

	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		sen := startServer(t, "redis-sentinel", bin, dir, 1, func(ports []int) []string {
			text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile ""
daemonize no
sentinel resolve-hostnames no
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 3000
sentinel parallel-syncs %s 1
`, ports[0], dir, sentinelMaster, master.ports[0], sentinelMaster, sentinelMaster, sentinelMaster)
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				t.Fatalf("testserver: write %s: %v", conf, err)
			}
			return []string{conf, "--sentinel"}
		})
		s.sentinels = append(s.sentinels, sen)
	}

	for _, sen := range s.sentinels {
		err := poll(sentinelTimeout, func() error { return sentinelSees(sen.Addr(), master.Addr(), len(s.sentinels)-1) })
		if err != nil {
			t.Fatalf("testserver: sentinel %s: %v%s", sen.Addr(), err, sen.process().logTail())
		}
	}
	return s
}

// sentinelSees checks that the sentinel at addr monitors master, healthy,
// with a healthy replica and others other sentinels.
func sentinelSees(addr, master string, others int) error {
	m, err := respMap(addr, "SENTINEL", "MASTER", sentinelMaster)
	if err != nil {
		return err
	}
	if got := net.JoinHostPort(m["ip"], m["port"]); got != master {
		return fmt.Errorf("sees master %s, want %s", got, master)
	}
	if m["flags"] != "master" {
		return fmt.Errorf("master flags %q", m["flags"])
	}
	if m["num-other-sentinels"] != strconv.Itoa(others) {
		return fmt.Errorf("sees %s other sentinels, want %d", m["num-other-sentinels"], others)
	}
	v, err := respDo(addr, "SENTINEL", "REPLICAS", sentinelMaster)
	if err != nil {
		return err
	}
	list, _ := v.([]any)
	for _, item := range list {
		r, err := pairs(item)
		if err != nil {
			return err
		}
		if r["flags"] == "slave" && r["master-link-status"] == "ok" {
			return nil
		}
	}
	return fmt.Errorf("sees no healthy replica among %d", len(list))
}

// MasterName returns the name the sentinels monitor the master under,
// "mymaster".
func (s *Sentinel) MasterName() string { return sentinelMaster }

// SentinelAddrs returns the three sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sen := range s.sentinels {
		addrs[i] = sen.Addr()
	}
	return addrs
}

// Nodes returns the two data nodes: the one started as master, then the one
// started as its replica. Their roles swap on failover; use
// [Sentinel.MasterAddr] to find the current master.
func (s *Sentinel) Nodes() []*Redis { return append([]*Redis(nil), s.nodes...) }

// MasterAddr asks the sentinels, in order until one answers, for the current
// master's address.
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	var errs []error
	for _, sen := range s.sentinels {
		addr, err := sentinelMasterAddr(sen.Addr())
		if err == nil {
			return addr
		}
		errs = append(errs, fmt.Errorf("%s: %w", sen.Addr(), err))
	}
	t.Fatalf("testserver: no sentinel answered GET-MASTER-ADDR-BY-NAME: %v", errors.Join(errs...))
	return ""
}

func sentinelMasterAddr(addr string) (string, error) {
	v, err := respDo(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster)
	if err != nil {
		return "", err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return "", fmt.Errorf("unexpected reply %v", v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}

// Failover forces a failover (SENTINEL FAILOVER mymaster, retried while a
// sentinel answers INPROGRESS or NOGOODSLAVE) and waits until every sentinel
// reports a different master and that master reports role:master. It returns
// the new master's address.
//
// As with a real failover, the old master keeps acting as a master (and
// accepting writes from clients still connected to it) until the sentinels
// turn it into a replica of the new one, about 10 s later; Failover does not
// wait for that.
func (s *Sentinel) Failover(t testing.TB) (newMaster string) {
	t.Helper()
	old := s.MasterAddr(t)
	err := poll(sentinelTimeout, func() error {
		_, err := respDo(s.sentinels[0].Addr(), "SENTINEL", "FAILOVER", sentinelMaster)
		var re respError
		if errors.As(err, &re) && !strings.HasPrefix(string(re), "INPROGRESS") && !strings.HasPrefix(string(re), "NOGOODSLAVE") {
			return permanent{err}
		}
		return err
	})
	if err != nil {
		t.Fatalf("testserver: SENTINEL FAILOVER: %v", err)
	}
	err = poll(sentinelTimeout, func() error {
		newMaster = ""
		for _, sen := range s.sentinels {
			addr, err := sentinelMasterAddr(sen.Addr())
			if err != nil {
				return fmt.Errorf("%s: %w", sen.Addr(), err)
			}
			if addr == old {
				return fmt.Errorf("sentinel %s still reports %s", sen.Addr(), old)
			}
			if newMaster != "" && addr != newMaster {
				return fmt.Errorf("sentinels disagree: %s and %s", newMaster, addr)
			}
			newMaster = addr
		}
		info, err := respInfo(newMaster, "INFO", "replication")
		if err != nil {
			return err
		}
		if info["role"] != "master" {
			return fmt.Errorf("new master %s reports role:%s", newMaster, info["role"])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testserver: failover from %s: %v", old, err)
	}
	return newMaster
}
