package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestExecHelpTTLNamesSessionStores checks that --ttl's help does not
// promise a takeover within --ttl on etcd and ZooKeeper: there a lock lives
// on its store's session, so a holder that dies is replaced only when the
// session expires (session_ttl, session_timeout), which may be longer.
func TestExecHelpTTLNamesSessionStores(t *testing.T) {
	i := strings.Index(execUsage, "  --ttl D")
	if i < 0 {
		t.Fatal("exec help has no --ttl flag")
	}
	rest := execUsage[i+len("  --ttl D"):]
	if j := regexp.MustCompile(`\n  --`).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	for _, want := range []string{"etcd", "ZooKeeper", "session_ttl", "session_timeout"} {
		if !strings.Contains(rest, want) {
			t.Errorf("--ttl help does not mention %s:\n%s", want, rest)
		}
	}
}
