// Package crosscheck holds tests that compare tasklock with independent
// implementations: package schedule's cron ticks with
// github.com/robfig/cron/v3. It is a module of its own so that the
// comparison's dependencies stay out of tasklock's go.mod; it has no code
// but its tests. Run it with
//
//	cd crosscheck && go test ./...
package crosscheck
