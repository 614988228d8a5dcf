package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// eventLog collects the events of one or more Schedulers.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) on(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

// of returns the events of job's tick on node, in order.
func (l *eventLog) of(node, job string, tick time.Time) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, e := range l.evs {
		if e.Node == node && e.Job == job && e.Tick.Equal(tick) {
			out = append(out, e)
		}
	}
	return out
}

// types names the events' types, for comparing sequences.
func types(evs []Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Type.String())
	}
	return strings.Join(s, " ")
}

// Every claimed tick gets a claim event and then exactly one outcome: a
// run's start and end, a skip, or nothing when paused; the node that lost
// the claim hears of it.
func TestEventsOfTicks(t *testing.T) {
	c := newCluster(t)
	var log eventLog
	rec := newRecorder(c.clock)
	fail := func(ctx context.Context, run Run) error { return errors.New("boom") }
	jobs := []Job{
		{Name: "ok", Schedule: "@every 10s", Handler: rec.ok, MisfireWindow: 10 * time.Second},
		{Name: "spaced", Schedule: "@every 10s", Handler: rec.ok, Lock: tasklock.ObtainOptions{MinHold: time.Hour}, MisfireWindow: 10 * time.Second},
		{Name: "failing", Schedule: "@every 10s", Handler: fail, MisfireWindow: 10 * time.Second},
	}
	a := c.node("a", 0, &Config{OnEvent: log.on}).add(t, jobs...).start(t)
	c.node("b", 0, &Config{OnEvent: log.on}).add(t, jobs...).start(t)
	c.settle(true)
	c.step(10 * time.Second)

	// claimer returns the node that claimed job's tick and checks that the
	// other one heard it was claimed elsewhere.
	claimer := func(job string, tick time.Time) (string, []Event) {
		t.Helper()
		ea, eb := log.of("a", job, tick), log.of("b", job, tick)
		if len(ea) > 0 && ea[0].Type == EventClaimedElsewhere {
			ea, eb = eb, ea
		}
		if types(eb) != "claimed_elsewhere" || len(ea) == 0 || ea[0].Type != EventClaimed {
			t.Fatalf("%s@%v: events %s on one node, %s on the other; want one claim", job, tick, types(ea), types(eb))
		}
		return ea[0].Node, ea
	}
	for _, tick := range []time.Time{t0, t0.Add(10 * time.Second)} {
		node, evs := claimer("ok", tick)
		if got := types(evs); got != "claimed run_started run_ended tick_ended" {
			t.Fatalf("ok@%v on %s: events %s", tick, node, got)
		}
		if te := evs[3]; te.Status != ledger.RunOK || te.Attempt != 1 || te.Fence != evs[2].Fence {
			t.Errorf("tick ended %+v after %+v", te, evs[2])
		}
		start, end := evs[1], evs[2]
		if start.Attempt != 1 || start.Fence == 0 || start.Late != start.Start.Sub(tick) || start.Start.IsZero() {
			t.Errorf("run started %+v", start)
		}
		if end.Status != ledger.RunOK || end.Fence != start.Fence || end.Attempt != 1 || !end.Start.Equal(start.Start) || end.Duration < 0 || end.Error != "" {
			t.Errorf("run ended %+v after %+v", end, start)
		}
	}

	if _, evs := claimer("spaced", t0); types(evs) != "claimed run_started run_ended tick_ended" {
		t.Fatalf("spaced@t0: events %s", types(evs))
	}
	_, evs := claimer("spaced", t0.Add(10*time.Second))
	if types(evs) != "claimed skipped" || evs[1].Status != ledger.RunSkipped || !strings.Contains(evs[1].Error, "held by") {
		t.Fatalf("spaced within MinHold: events %+v, want a claim and a skip", evs)
	}

	_, evs = claimer("failing", t0)
	if types(evs) != "claimed run_started run_ended tick_ended" || evs[2].Status != ledger.RunFailed || evs[2].Error != "boom" ||
		evs[3].Status != ledger.RunFailed || evs[3].Error != "boom" {
		t.Fatalf("failing@t0: events %+v", evs)
	}

	if err := a.s.Pause(context.Background(), "ok"); err != nil {
		t.Fatal(err)
	}
	c.step(10 * time.Second)
	paused := t0.Add(20 * time.Second)
	_, evs = claimer("ok", paused)
	if types(evs) != "claimed" || !evs[0].Paused {
		t.Fatalf("paused tick: events %+v, want only a claim marked paused", evs)
	}
}

// Ticks the misfire policy passes over are claimed and missed; the one it
// runs is a catch-up.
func TestEventsOfMissedTicks(t *testing.T) {
	c := newCluster(t)
	var log eventLog
	rec := newRecorder(c.clock)
	job := Job{Name: "minutely", Schedule: "@every 1m", Handler: rec.ok, Misfire: MisfireOnce, MisfireWindow: 30 * time.Minute}
	a := c.node("a", 0, nil).add(t, job).start(t)
	c.settle(true)
	a.shutdown(t)
	c.advance(10*time.Minute + 30*time.Second)
	c.node("b", 0, &Config{OnEvent: log.on}).add(t, job).start(t)
	c.settle(true)

	var got []string
	for m := 1; m <= 10; m++ {
		tick := t0.Add(time.Duration(m) * time.Minute)
		evs := log.of("b", "minutely", tick)
		got = append(got, fmt.Sprintf("%d: %s", m, types(evs)))
		for _, e := range evs {
			switch {
			case e.Type == EventClaimed && e.Late != c.clock.Now().Sub(tick):
				t.Errorf("claim of tick %d: late %v", m, e.Late)
			case e.Type == EventMissed && (e.Status != ledger.RunMissed || e.Late < time.Minute || !strings.Contains(e.Error, "missed")):
				t.Errorf("missed tick %d: %+v", m, e)
			case e.Type == EventRunStarted && !e.CatchUp:
				t.Errorf("catch-up run of tick %d: %+v", m, e)
			}
		}
	}
	want := "1: claimed missed|2: claimed missed|3: claimed missed|4: claimed missed|5: claimed missed|" +
		"6: claimed missed|7: claimed missed|8: claimed missed|9: claimed missed|10: claimed run_started run_ended tick_ended"
	if strings.Join(got, "|") != want {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.ReplaceAll(want, "|", "\n"))
	}
}

func TestEventTypeString(t *testing.T) {
	for ty, want := range map[EventType]string{EventClaimed: "claimed", EventRunEnded: "run_ended", EventTickEnded: "tick_ended", 0: "", 99: "unknown"} {
		if got := ty.String(); got != want {
			t.Errorf("EventType(%d).String() = %q, want %q", ty, got, want)
		}
	}
}

// A re-run's attempt, asked for with RequestRerun, has Requested set on
// its EventRunStarted and EventRunEnded; the tick's scheduled run has it
// unset. Metrics leave Requested runs out of lateness: their Late is the
// tick's age.
func TestEventsMarkRequestedRuns(t *testing.T) {
	c := newCluster(t)
	var log eventLog
	c.onEvent = log.on
	rec := newRecorder(c.clock)
	c.node("a", 0, nil).add(t, Job{Name: "j", Schedule: "@every 1m", Handler: rec.ok}).start(t)
	c.settle(true)
	tick := t0.Add(time.Minute)
	c.step(time.Minute)
	c.waitRecords("j", tick.Add(-time.Second), 1)
	c.step(time.Hour)
	if _, err := RequestRerun(context.Background(), c.ledger, "j", tick, BackfillOptions{Now: c.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	var runs []Event
	waitFor(t, "the tick's run and re-run to end", func() bool {
		c.advance(100 * time.Millisecond)
		runs = runs[:0]
		for _, e := range log.of("a", "j", tick) {
			if e.Type == EventRunStarted || e.Type == EventRunEnded {
				runs = append(runs, e)
			}
		}
		return len(runs) == 4
	})
	for _, e := range runs {
		if want := e.Attempt == 2; e.Requested != want {
			t.Errorf("%s of attempt %d: Requested %v, want %v (the re-run's)", e.Type, e.Attempt, e.Requested, want)
		}
	}
}
