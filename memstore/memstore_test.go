package memstore_test

import (
	"os"
	"testing"

	"github.com/tasklock/tasklock/internal/leakcheck"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store { return memstore.New(nil) })
}
