package schedule

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// registeredLedger returns a memstore ledger in which job is registered
// with spec since a day before now.
func registeredLedger(t *testing.T, job, spec string, now time.Time) *memstore.Store {
	t.Helper()
	l := memstore.New(nil)
	if _, err := l.SetJobState(context.Background(), ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: now.Add(-24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return l
}

// Counting a range stops one tick past Max: a range of a day of a
// one-second cron schedule is refused as holding more than Max ticks,
// without its count, and nothing is requested. An @every schedule's range
// is counted whole, by arithmetic: 27 years of one-second ticks are
// refused with their exact count.
func TestBackfillCountStopsPastMax(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	l := registeredLedger(t, "cron1", "* * * * * *", now)
	from, to := now.Add(-25*time.Hour), now.Add(-time.Hour)
	_, err := RequestBackfill(ctx, l, "cron1", from, to, BackfillOptions{Now: now, Max: 10})
	var tooMany *TooManyTicksError
	if !errors.As(err, &tooMany) || *tooMany != (TooManyTicksError{Job: "cron1", Max: 10}) || !errors.Is(err, ErrBadRequest) {
		t.Fatalf("cron, a day of seconds, Max 10: %#v, want a *TooManyTicksError{cron1, 0, 10} matching ErrBadRequest", err)
	}
	if want := "holds more than 10 ticks"; !strings.Contains(err.Error(), want) {
		t.Errorf("%v: want %q in it", err, want)
	}
	if sts, _ := l.Jobs(ctx); len(sts) != 1 || len(sts[0].Triggers) != 0 {
		t.Errorf("requests were added: %+v", sts)
	}

	l = registeredLedger(t, "every1", "@every 1s", now)
	from = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = RequestBackfill(ctx, l, "every1", from, to, BackfillOptions{Now: now, Max: 10})
	if want := int(to.Sub(from)/time.Second) + 1; !errors.As(err, &tooMany) || tooMany.Ticks != want {
		t.Errorf("@every 1s from 2000: %v, want the count %d", err, want)
	}
}

// Max is bounded by MaxBackfill: a larger one is refused, before the
// ledger is read.
func TestBackfillMaxBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	l := registeredLedger(t, "m", "@every 1m", now)
	_, err := RequestBackfill(ctx, l, "m", now.Add(-time.Hour), now, BackfillOptions{Now: now, Max: MaxBackfill + 1})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "MaxBackfill") {
		t.Errorf("Max %d: %v, want a bad request naming MaxBackfill", MaxBackfill+1, err)
	}
	if ticks, err := RequestBackfill(ctx, l, "m", now.Add(-time.Hour), now, BackfillOptions{Now: now, Max: MaxBackfill}); err != nil || len(ticks) != 61 {
		t.Errorf("Max MaxBackfill: %d ticks, %v; want 61", len(ticks), err)
	}
	_, err = RequestBackfill(ctx, l, "m", now.Add(-30*24*time.Hour), now, BackfillOptions{Now: now, Max: MaxBackfill})
	if err == nil || !strings.Contains(err.Error(), "ask for a shorter range or several") {
		t.Errorf("a range past MaxBackfill: %v, want it to say to ask for several, not a larger Max", err)
	}
}

// pacedLedger is a ledger whose SetJobState takes writeTime, as a SQLite
// file's write does, and notes when each call began and ended.
type pacedLedger struct {
	*memstore.Store
	writeTime time.Duration
	mu        sync.Mutex
	calls     [][2]time.Time // begin, end
	reads     []ledger.RunQuery
}

func (l *pacedLedger) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	begin := time.Now()
	for time.Since(begin) < l.writeTime { // a slow store, not a wait for anything
	}
	st, err := l.Store.SetJobState(ctx, p)
	l.mu.Lock()
	l.calls = append(l.calls, [2]time.Time{begin, time.Now()})
	l.mu.Unlock()
	return st, err
}

func (l *pacedLedger) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	l.mu.Lock()
	l.reads = append(l.reads, q)
	l.mu.Unlock()
	return l.Store.Runs(ctx, q)
}

// A backfill's requests are not written back to back: after each, the
// backfill waits as long as it took, so that a store with one writer at a
// time (SQLite) is free for the nodes half the time.
func TestBackfillPacesItsWrites(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	l := &pacedLedger{Store: registeredLedger(t, "m", "@every 1m", now), writeTime: 2 * time.Millisecond}
	ticks, err := RequestBackfill(ctx, l, "m", now.Add(-9*time.Minute), now, BackfillOptions{Now: now})
	if err != nil || len(ticks) != 10 {
		t.Fatalf("%d ticks, %v; want 10", len(ticks), err)
	}
	if len(l.calls) != 10 {
		t.Fatalf("%d writes, want 10", len(l.calls))
	}
	for i := 1; i < len(l.calls); i++ {
		took, gap := l.calls[i-1][1].Sub(l.calls[i-1][0]), l.calls[i][0].Sub(l.calls[i-1][1])
		if gap < took {
			t.Errorf("write %d began %v after write %d ended, which took %v: want a pause at least as long", i, gap, i-1, took)
		}
	}
}

// A backfill whose context ends while it paces returns the ticks it
// requested, with the context's error.
func TestBackfillPaceEndsWithContext(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	l := &cancelAfterLedger{Store: registeredLedger(t, "m", "@every 1m", now), after: 3, cancel: cancel}
	ticks, err := RequestBackfill(ctx, l, "m", now.Add(-9*time.Minute), now, BackfillOptions{Now: now})
	if len(ticks) != 3 || !errors.Is(err, context.Canceled) {
		t.Errorf("%d ticks, %v; want 3 and context.Canceled", len(ticks), err)
	}
}

// cancelAfterLedger calls cancel after its after'th SetJobState has
// succeeded.
type cancelAfterLedger struct {
	*memstore.Store
	after  int
	n      int
	cancel context.CancelFunc
}

func (l *cancelAfterLedger) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	st, err := l.Store.SetJobState(ctx, p)
	if l.n++; l.n == l.after {
		l.cancel()
	}
	return st, err
}

// A backfill reads the attempts of its ticks a chunk at a time, each read
// spanning at most backfillChunk ticks, and each request carries its
// tick's base however far into the range it is.
func TestBackfillReadsInChunks(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	l := &pacedLedger{Store: registeredLedger(t, "m", "@every 1s", now)}
	n := 2*backfillChunk + 10
	from := now.Add(-time.Duration(n) * time.Second)
	ran := map[int64]int{}
	for _, i := range []int{0, backfillChunk - 1, backfillChunk, n - 1} {
		tick := from.Add(time.Duration(i) * time.Second)
		ran[tick.Unix()] = 2
		if err := l.RecordRuns(ctx, []ledger.RunRecord{{Job: "m", Tick: tick, Attempt: 2, Node: "a", Status: ledger.RunFailed, Start: tick, End: tick}}); err != nil {
			t.Fatal(err)
		}
	}
	ticks, err := RequestBackfill(ctx, l, "m", from, from.Add(time.Duration(n-1)*time.Second), BackfillOptions{Now: now, Max: n})
	if err != nil || len(ticks) != n {
		t.Fatalf("%d ticks, %v; want %d", len(ticks), err, n)
	}
	if len(l.reads) != 3 {
		t.Errorf("%d reads of the attempts, want 3", len(l.reads))
	}
	for _, q := range l.reads {
		if span := q.To.Sub(q.From); span > backfillChunk*time.Second {
			t.Errorf("a read spans %v, more than %d ticks", span, backfillChunk)
		}
	}
	sts, err := l.Jobs(ctx)
	if err != nil || len(sts) != 1 || len(sts[0].Triggers) != n {
		t.Fatalf("jobs: %+v, %v; want %d requests", sts, err, n)
	}
	for _, tr := range sts[0].Triggers {
		if got, want := pastBase(tr.ID), ran[tr.Tick.Unix()]; got != want {
			t.Errorf("the request of %v has base %d, want %d", tr.Tick, got, want)
		}
	}
}
