//go:build unix

package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// catalogPoll is how often every serve node reads the jobs defined at run
// time (tasklock jobs create, POST /api/jobs), so that each applies a
// change within a second.
const catalogPoll = schedule.DefaultPollInterval

// runtimeJob is a job defined at run time as this node applied it.
type runtimeJob struct {
	version int64
	job     config.Job
}

// runtimeJobs is this node's view of the jobs defined at run time: those
// applied to the Scheduler in force, and the definitions it ignores
// (already warned about), by name and version.
type runtimeJobs struct {
	mu      sync.Mutex // held by reconcile and by reload while it swaps Schedulers
	applied map[string]runtimeJob
	ignored map[string]int64
	sharing map[string]bool // ignored for sharing a lock with another job defined at run time
}

// startCatalog reads the jobs defined at run time once, then every
// catalogPoll until the returned function is called, which waits for the
// poller to stop (calling it again does nothing).
func (s *server) startCatalog() (stop func()) {
	if s.catalog == nil {
		return func() {}
	}
	s.reconcile()
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(catalogPoll)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.reconcile()
			}
		}
	}()
	return sync.OnceFunc(func() { close(quit); <-done })
}

// reconcile makes the Scheduler in force run the jobs defined at run time:
// it adds the new ones, replaces those with a new version (the old run in
// progress finishes) and removes the deleted ones (their runs finish, or
// are cancelled when the delete said so). A definition of a job the
// configuration file names is ignored, with one warning per version: the
// file is authoritative.
func (s *server) reconcile() {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	defs, err := s.catalog.JobDefs(ctx)
	s.catalogFail.Log(s.log, time.Now(), err, "reading the jobs defined at run time; will retry", "reading the jobs defined at run time again")
	if err != nil {
		return
	}
	rt := &s.runtime
	rt.mu.Lock()
	defer rt.mu.Unlock()
	s.mu.Lock()
	cur, f := s.cur, s.file
	s.mu.Unlock()
	if cur == nil {
		return
	}
	inFile := make(map[string]bool, len(f.Jobs))
	for _, j := range f.Jobs {
		inFile[j.Name] = true
	}
	want := make(map[string]ledger.JobDef, len(defs))
	for _, d := range defs {
		if inFile[d.Job] {
			if rt.ignored[d.Job] != d.Version {
				rt.ignored[d.Job] = d.Version
				s.log.Warn("ignoring a job defined at run time: the configuration file defines a job of this name, and the file is authoritative",
					"job", d.Job, "version", d.Version, "config", s.c.config)
			}
			continue
		}
		want[d.Job] = d
	}
	shared := rt.sharedLocks(want, f.Jobs)
	for name := range rt.sharing {
		if shared[name] == "" {
			// The job it shared a lock with is gone or changed: try again.
			delete(rt.sharing, name)
			delete(rt.ignored, name)
		}
	}
	changed := false
	for name, a := range rt.applied {
		d, ok := want[name]
		if ok && d.Version == a.version && shared[name] == "" {
			continue
		}
		opts := schedule.RemoveOptions{}
		action := "replaced"
		switch {
		case !ok:
			action = "deleted"
			opts.Cancel = s.deleteCancels(ctx, name)
		case shared[name] != "":
			action = "removed: it shares a lock with another job defined at run time"
		}
		if err := cur.Remove(name, opts); err != nil {
			s.log.Error("removing a job defined at run time", "job", name, "err", err)
		}
		delete(rt.applied, name)
		changed = true
		if !ok {
			s.log.Info("job defined at run time deleted", "job", name, "version", a.version, "cancel_running", opts.Cancel)
		} else {
			s.log.Debug("job defined at run time "+action, "job", name, "version", a.version)
		}
	}
	for name, d := range want {
		if _, ok := rt.applied[name]; ok {
			continue
		}
		if rt.ignored[name] == d.Version {
			continue // invalid, warned already
		}
		j, err := config.ParseJob(fmt.Sprintf("job %s defined at run time (version %d)", name, d.Version), []byte(d.Def))
		if err == nil && j.Name != name {
			err = fmt.Errorf("its definition names job %q", j.Name)
		}
		if err == nil {
			// The file's jobs win, as they do for a name.
			if msg := config.SharedLock(j, f.Jobs); msg != "" {
				err = fmt.Errorf("job %q: %s", name, msg)
			} else if msg := shared[name]; msg != "" {
				err = fmt.Errorf("job %q: %s", name, msg)
				if rt.sharing == nil {
					rt.sharing = make(map[string]bool)
				}
				rt.sharing[name] = true
			}
		}
		if err == nil {
			sj := j.Job
			sj.Handler = s.handler(j)
			err = config.SchedulerError(cur.Add(sj))
		}
		if err != nil {
			rt.ignored[name] = d.Version
			s.log.Error("cannot apply a job defined at run time; fix it with tasklock jobs update", "job", name, "version", d.Version, "err", err)
			continue
		}
		delete(rt.ignored, name)
		rt.applied[name] = runtimeJob{version: d.Version, job: j}
		changed = true
		s.log.Info("job defined at run time applied", "job", name, "version", d.Version, "schedule", j.Schedule)
		for _, msg := range j.NoEffect {
			// Stored before jobs create refused it: once per version
			// applied, for the job still runs.
			s.log.Warn("job defined at run time: "+msg+"; fix it with tasklock jobs update", "job", name, "version", d.Version)
		}
	}
	for name := range rt.ignored {
		if _, ok := want[name]; !ok && !inFile[name] {
			delete(rt.ignored, name)
		}
	}
	if changed {
		jobs := make([]config.Job, 0, len(rt.applied))
		for _, a := range rt.applied {
			jobs = append(jobs, a.job)
		}
		slices.SortFunc(jobs, func(a, b config.Job) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
		s.mu.Lock()
		s.rtJobs = jobs
		s.rtGen++
		s.mu.Unlock()
		s.obs.setJobs(f.Jobs, jobs)
	}
}

// sharedLocks says which of the jobs defined at run time in want cannot
// run because a lock their runs take is one another of them takes, and
// why. Of two such jobs, the one whose name sorts first runs: every node
// reading the same definitions decides alike, whichever it applied first.
// Jobs that cannot be applied for another reason (invalid, or sharing a
// lock with a job of the file) are passed over: they exclude nobody.
func (rt *runtimeJobs) sharedLocks(want map[string]ledger.JobDef, file []config.Job) map[string]string {
	var shared map[string]string
	var accepted []config.Job
	for _, name := range slices.Sorted(maps.Keys(want)) {
		d := want[name]
		j := rt.applied[name].job
		if a, ok := rt.applied[name]; !ok || a.version != d.Version {
			var err error
			if j, err = config.ParseJob("job "+name, []byte(d.Def)); err != nil || j.Name != name {
				continue
			}
		}
		if config.SharedLock(j, file) != "" {
			continue
		}
		for _, o := range accepted {
			if msg := config.SharedLock(j, []config.Job{o}); msg != "" {
				if shared == nil {
					shared = make(map[string]string)
				}
				shared[name] = msg + " (defined at run time too; of two such jobs the one whose name sorts first runs)"
				break
			}
		}
		if shared[name] == "" {
			accepted = append(accepted, j)
		}
	}
	return shared
}

// deleteCancels reports whether the newest audit entry of the deleted
// job asks for its runs in progress to be cancelled.
func (s *server) deleteCancels(ctx context.Context, job string) bool {
	es, err := s.catalog.Audit(ctx, ledger.AuditQuery{Job: job, Limit: 1})
	if err != nil {
		s.log.Warn("reading the audit of a deleted job; its runs in progress finish", "job", job, "err", err)
		return false
	}
	return len(es) == 1 && apijson.DeleteCancels(es[0])
}

// forgetApplied is called by reload with the runtime jobs' lock held,
// after it put a new Scheduler in force: the jobs defined at run time are
// applied to it afresh by the next reconcile.
func (rt *runtimeJobs) forgetApplied() {
	clear(rt.applied)
	clear(rt.ignored)
}

// fileJob reports whether the configuration file in force defines name,
// for the dashboard's job API.
func (s *server) fileJob(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.file.Jobs {
		if j.Name == name {
			return true
		}
	}
	return false
}
