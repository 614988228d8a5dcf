package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store { return memstore.New(nil) })
}
