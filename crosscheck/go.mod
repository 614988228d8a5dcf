module github.com/tasklock/tasklock/crosscheck

go 1.25.0

replace github.com/tasklock/tasklock => ../

require (
	github.com/robfig/cron/v3 v3.0.1
	github.com/tasklock/tasklock v0.0.0-00010101000000-000000000000
)
