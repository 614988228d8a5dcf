package redlock

import (
	"testing"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestCheck: Check names the nodes that do not answer, and how many more
// may fail before no lock call reaches a quorum; with every node up it
// names none.
func TestCheck(t *testing.T) {
	srvs := startNodes(t, 4)
	down := testserver.ClosedAddr(t)
	for _, tc := range []struct {
		name   string
		addrs  []string
		failed []string
		spare  int
	}{
		{"all up", addrsOf(srvs[:3]), nil, 1},
		{"one of 3 down", []string{srvs[0].Addr(), down, srvs[1].Addr()}, []string{down}, 0},
		{"one of 5 down", []string{srvs[0].Addr(), srvs[1].Addr(), down, srvs[2].Addr(), srvs[3].Addr()}, []string{down}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(newClients(t, tc.addrs), nil)
			if err != nil {
				t.Fatal(err)
			}
			h := s.Check(ctxT(t))
			var failed []string
			for _, ne := range h.Failed {
				if ne.Err == nil {
					t.Errorf("node %s failed without an error", ne.Addr)
				}
				failed = append(failed, ne.Addr)
			}
			if len(failed) != len(tc.failed) || (len(failed) > 0 && failed[0] != tc.failed[0]) {
				t.Errorf("Check failed %v, want %v", failed, tc.failed)
			}
			if h.Nodes != len(tc.addrs) || h.Quorum != len(tc.addrs)/2+1 || h.Spare() != tc.spare {
				t.Errorf("Check = %d nodes, quorum %d, spare %d; want %d, %d, %d", h.Nodes, h.Quorum, h.Spare(), len(tc.addrs), len(tc.addrs)/2+1, tc.spare)
			}
		})
	}
}
