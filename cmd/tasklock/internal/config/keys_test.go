package config

import (
	"reflect"
	"strings"
	"testing"
)

// Two jobs whose runs would take the same lock exclude each other: a job
// named like a shard of a sharded job ("x/shard/2") would have shard 2 of x
// skipped as "the previous run is still in progress" while it runs, and the
// other way round. Such a file is refused, naming both.
func TestParseRefusesJobsSharingALock(t *testing.T) {
	for in, want := range map[string]string{
		`jobs:
  - name: x
    schedule: "@every 1s"
    shards: 3
    command: ["true"]
  - name: x/shard/2
    schedule: "@every 1s"
    command: ["true"]
`: `c.yaml:6: job "x/shard/2": name: its lock "schedule/x/shard/2" is the lock of shard 2 of job "x" (line 2): the two would exclude each other; rename one`,
		`jobs:
  - name: x/shard/0
    schedule: "@every 1s"
    overlap: allow
    command: ["true"]
  - name: x
    schedule: "@every 1s"
    shards: 2
    command: ["true"]
`: `c.yaml:2: job "x/shard/0": name: its lock "schedule/x/shard/0" is the lock of shard 0 of job "x" (line 6): the two would exclude each other; rename one`,
		`pools: {a/running: 2}
jobs:
  - name: pool/a
    schedule: "@every 1s"
    max_concurrent: 2
    command: ["true"]
`: `c.yaml:3: job "pool/a": max_concurrent: its semaphore "schedule/pool/a/running" is the one of pool "a/running": the two would share their permits; rename the job or the pool`,
	} {
		_, err := Parse("c.yaml", []byte(in))
		if got := AsErrors(err); !reflect.DeepEqual(got, []string{want}) {
			t.Errorf("%s:\n got  %s\n want %s", in, strings.Join(got, "; "), want)
		}
	}
	// Names that only look alike take other locks.
	ok := `pools: {a: 2}
jobs:
  - name: x
    schedule: "@every 1s"
    shards: 3
    command: ["true"]
  - name: x/shard/3
    schedule: "@every 1s"
    command: ["true"]
  - name: x/shard/02
    schedule: "@every 1s"
    command: ["true"]
  - name: pool/a
    schedule: "@every 1s"
    command: ["true"]
  - name: x/running
    schedule: "@every 1s"
    command: ["true"]
`
	if _, err := Parse("c.yaml", []byte(ok)); err != nil {
		t.Errorf("distinct locks refused: %v", err)
	}
}
