//go:build unix

package cli

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

// Exit statuses of the tasklock command that these tests check (the
// command's own constants, in cmd/tasklock/main.go).
const (
	exitOK       = 0
	exitSoftware = 70 // EX_SOFTWARE: the lock was lost while COMMAND ran
)

// tl is the tasklock binary TestMain builds.
var tl *clitest.Binary

// TestMain builds the tasklock binary once for every test here (from this
// module, so with the library the replace directive points at), runs the
// tests and removes the binary.
func TestMain(m *testing.M) {
	var err error
	tl, err = clitest.Build("github.com/tasklock/tasklock/cmd/tasklock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testserver.Main(m, proxy.IgnoreToxics)
	tl.Remove()
	os.Exit(code)
}

// lockKey is the Redis key of a lock (redisstore's default layout).
func lockKey(key string) string { return "tasklock:{" + key + "}" }

func exists(t *testing.T, c *redis.Client, key string) bool {
	t.Helper()
	n, err := c.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}
