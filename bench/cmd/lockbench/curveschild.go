package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// The P4 curve runs each size in a process of its own: lockbench started
// again with -curves-child. runP4's heap samples are taken after two
// forced collections while the locks renew, and a collection keeps all
// that is allocated while it marks. Alone, the two collections take
// milliseconds, and a sample that falls in a renewal call counts that
// call's buffers (its batch of leases and their commands, 180-260 B a
// lease, freed when the call returns); the median of the samples leaves
// it out. In the process of a full run, whose heap holds what the earlier
// measurements left, they took seconds, spanned several renewal calls and
// counted them all in every sample (846-1,835 B a lock after P1-sql on
// MariaDB, 313-318 B alone). A fresh process holds the locks, their
// Locker and client, and nothing else.

// curvesChildSpec is what a -curves-child process is told: one P4 run.
type curvesChildSpec struct {
	Addr      string        `json:"addr"`       // the curves' redis-server
	ServerPID int           `json:"server_pid"` // its process, for its CPU time
	Locks     int           `json:"locks"`
	TTL       time.Duration `json:"ttl"`
	Quick     bool          `json:"quick"`
}

// curvesChildResult is a p4Result as the child prints it (JSON, on its
// standard output).
type curvesChildResult struct {
	Locks          int           `json:"locks"`
	ObtainTime     time.Duration `json:"obtain_time"`
	Window         time.Duration `json:"window"`
	Renewed        int64         `json:"renewed"`
	Lost           int64         `json:"lost"`
	RoundTrips     int64         `json:"round_trips"`
	Pipelines      int64         `json:"pipelines"`
	Single         int64         `json:"single"`
	Piped          int64         `json:"piped"`
	Cycles         float64       `json:"cycles"`
	GoroutineDelta int           `json:"goroutine_delta"`
	HeapPerLock    float64       `json:"heap_per_lock"`
	HeapSamples    []float64     `json:"heap_samples"`
	TTL            time.Duration `json:"ttl"`
	Client         time.Duration `json:"client"`
	Server         time.Duration `json:"server"`
	CPUOK          bool          `json:"cpu_ok"`
}

func newCurvesChildResult(r *p4Result) curvesChildResult {
	return curvesChildResult{r.locks, r.obtainTime, r.window, r.renewed, r.lost, r.roundTrips, r.pipelines, r.single, r.piped,
		r.cycles, r.goroutineDelta, r.heapPerLock, r.heapSamples, r.ttl, r.client, r.server, r.cpuOK}
}

func (c curvesChildResult) p4() *p4Result {
	return &p4Result{locks: c.Locks, obtainTime: c.ObtainTime, window: c.Window, renewed: c.Renewed, lost: c.Lost,
		roundTrips: c.RoundTrips, pipelines: c.Pipelines, single: c.Single, piped: c.Piped, cycles: c.Cycles,
		goroutineDelta: c.GoroutineDelta, heapPerLock: c.HeapPerLock, heapSamples: c.HeapSamples, ttl: c.TTL,
		client: c.Client, server: c.Server, cpuOK: c.CPUOK}
}

// runP4Child runs runP4 for n locks of lease ttl on srv in a new lockbench
// process and returns its result. The child's progress lines go to this
// process's standard error.
func runP4Child(ctx context.Context, srv *server, n int, ttl time.Duration, quick bool) (*p4Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("lockbench: find my executable to start the P4 curve's process: %w", err)
	}
	spec, err := json.Marshal(curvesChildSpec{Addr: srv.addr, ServerPID: srv.cmd.Process.Pid, Locks: n, TTL: ttl, Quick: quick})
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-curves-child", string(spec))
	cmd.SysProcAttr = procAttr()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("lockbench: the P4 curve's process: %w", err)
	}
	var res curvesChildResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("lockbench: the P4 curve's process printed %q: %w", out.Bytes(), err)
	}
	return res.p4(), nil
}

// runCurvesChild is lockbench started with -curves-child: it runs the P4
// run of specJSON on the redis-server it names, prints the result as JSON
// on its standard output and returns the exit code.
func runCurvesChild(specJSON string) int {
	var spec curvesChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: -curves-child: %v\n", err)
		return 2
	}
	proc, err := os.FindProcess(spec.ServerPID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: -curves-child: %v\n", err)
		return 2
	}
	// Only addr and the process (for its CPU time) are used: the parent
	// owns and stops the server.
	srv := &server{addr: spec.Addr, cmd: &exec.Cmd{Process: proc}}
	res, err := runP4(context.Background(), srv, spec.Locks, spec.TTL, spec.Quick, "")
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: -curves-child: %v\n", err)
		return 1
	}
	b, err := json.Marshal(newCurvesChildResult(res))
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: -curves-child: %v\n", err)
		return 1
	}
	fmt.Printf("%s\n", b)
	return 0
}
