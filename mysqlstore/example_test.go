package mysqlstore_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/mysqlstore"
)

// A lease-mode store on the caller's pool; Migrate creates the table on
// first use. (Examples here need a server, so they are compiled, not run.)
func ExampleNew() {
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, &mysqlstore.Options{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	res, err := tasklock.Once(context.Background(), locker, "reports/daily",
		&tasklock.ObtainOptions{TTL: 30 * time.Second, MinHold: time.Minute},
		func(ctx context.Context) error {
			// ... the work; ctx is cancelled if the lock is lost.
			return nil
		})
	switch {
	case err != nil:
		log.Print(err)
	case !res.Ran:
		log.Printf("another replica (%s) is running the report or just ran it", res.Holder)
	}
}

// Connection mode holds each lock on its own connection, so a crashed
// holder's locks are freed at once; keepalive makes a dead network show
// within seconds.
func ExampleKeepAliveDialer() {
	mysql.RegisterDialContext("tcpka", mysqlstore.KeepAliveDialer(5*time.Second, 10*time.Second))
	db, err := sql.Open("mysql", "app:secret@tcpka(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(64) // locks held at once, plus headroom
	store, err := mysqlstore.New(db, &mysqlstore.Options{Mode: mysqlstore.ModeConnection})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the Lockers, before db
	_ = store
}

// MigrationStatus for a `tasklock migrate status`-like report.
func ExampleMigrationStatus() {
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	states, err := mysqlstore.MigrationStatus(context.Background(), db, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range states {
		log.Printf("%03d_%s applied=%v %v", m.Version, m.Name, m.Applied(), m.AppliedAt)
	}
}
