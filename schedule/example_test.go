package schedule_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// Every replica runs the same Scheduler with the same jobs; each tick of a
// job runs once across them. Here one replica, on memstore, runs a job that
// is due every second until it has run once.
func ExampleNew() {
	store := memstore.New(nil) // in production: the replicas' shared store, e.g. redisstore
	locker, err := tasklock.New(store, &tasklock.Config{Owner: "web-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	s, err := schedule.New(locker, store, &schedule.Config{Node: "web-1"})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan schedule.Run, 1)
	err = s.Add(schedule.Job{
		Name:     "cleanup",
		Schedule: "@every 1s",
		Handler: func(ctx context.Context, run schedule.Run) error {
			// ctx ends if the job's lock is lost; pass run.Fence to what you write.
			select {
			case ran <- run:
			default:
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	run := <-ran
	fmt.Printf("%s ran on %s\n", run.Job, run.Node)
	if err := s.Shutdown(ctx); err != nil { // waits for running handlers
		log.Fatal(err)
	}
	// Output: cleanup ran on web-1
}

// Trigger runs a job now, once, on whichever node sees the request first;
// Runs reads the history every node records.
func ExampleScheduler_Trigger() {
	store := memstore.New(nil) // one store keeps the locks and the ledger
	locker, err := tasklock.New(store, &tasklock.Config{Owner: "web-1"})
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	s, err := schedule.New(locker, store, &schedule.Config{Node: "web-1"})
	if err != nil {
		panic(err)
	}
	runs := make(chan schedule.Run, 8)
	err = s.Add(schedule.Job{
		Name:     "nightly-report",
		Schedule: "0 30 2 * * *", // 02:30:00 every day
		TimeZone: "Europe/Berlin",
		Timeout:  time.Hour,
		Handler: func(ctx context.Context, run schedule.Run) error {
			fmt.Fprintln(run.Output, "report written") // kept in history
			runs <- run
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		panic(err)
	}

	// Run it now, once, on whichever node sees the request first.
	id, err := s.Trigger(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	for run := range runs {
		if run.Trigger == id {
			fmt.Printf("%s ran on %s, attempt %d, fenced: %v\n", run.Job, run.Node, run.Attempt, run.Fence > 0)
			break
		}
	}
	if err := s.Shutdown(ctx); err != nil { // waits for the run to be recorded
		panic(err)
	}
	history, err := s.Runs(ctx, ledger.RunQuery{Job: "nightly-report"})
	if err != nil {
		panic(err)
	}
	for _, r := range history {
		if r.Trigger == id {
			fmt.Printf("history: %s, output %q\n", r.Status, r.Output)
		}
	}
	// Output:
	// nightly-report ran on web-1, attempt 1, fenced: true
	// history: ok, output "report written\n"
}
