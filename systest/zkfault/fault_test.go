package zkfault

import (
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
	"github.com/tasklock/tasklock/zkstore"
)

// TestFaults runs the fault tests side by side.
func TestFaults(t *testing.T) {
	t.Run("NetworkBlackholed", func(t *testing.T) { t.Parallel(); testBlackholed(t) })
}

// testBlackholed: the holder's traffic to ZooKeeper is blackholed by a
// proxy. Its Done closes before its session could expire at the server
// (its TTL is the session timeout, counted from its last renewal, which the
// server heard), and another (connected directly) obtains only after that.
func testBlackholed(t *testing.T) {
	z, c := shared(t)
	root := newRoot()
	proxy := proxy.Start(t, z.Addr())
	hc := connect(t, proxy.Addr(), faultSession)
	holder := newLocker(t, newStore(t, hc, faultSession, &zkstore.Options{Root: root}), "holder")
	other := newLocker(t, newStore(t, c, testSession, &zkstore.Options{Root: root}), "other")
	l1, err := holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultSession})
	if err != nil {
		t.Fatal(err)
	}
	work := faulttest.StartWork(t, l1)
	proxy.Blackhole(t)
	cut := time.Now()

	tk := work.AwaitTakeover(t, l1, other, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second, Wait: 10 * time.Second},
		cut, faultSession+time.Second, "the session timeout + 1s")
	if tk.DoneAt.Sub(cut) > faultSession {
		t.Errorf("Done closed %v after the cut, later than the session timeout %v", tk.DoneAt.Sub(cut), faultSession)
	}
	tk.Check(t, work, "")
	acc, rej := work.Reg.Counts()
	t.Logf("register: %d accepted, %d rejected (the probe above)", acc, rej)
	proxy.Restore(t)
}
