# tasklock: make test runs everything CI runs; make bench runs the side-by-side benchmarks.
GO ?= go
# -p 1: one package at a time. Every store's suite starts real servers and
# checks lease timings; two suites sharing the 2 cores starve each other.
# -parallel 4: within a package, up to 4 parallel tests at once (the
# default is GOMAXPROCS, 2 here). Most of them wait on leases, processes
# and servers, not the CPU: cmd/tasklock's took 316 s with 2, 215 s with 4.
GOTESTFLAGS ?= -race -count=1 -p 1 -parallel 4 -timeout 20m

.PHONY: test servers vet tidy bench bench-quick bench-dashboard fmt test-stress screenshots

# The library's tests, then the two test-only modules beside it: systest
# (network faults through toxiproxy, the dashboard in Chromium) and
# crosscheck (our cron against robfig/cron). They are modules of their own
# so that their tooling never reaches a user's go.sum (scripts/check-deps.sh).
test: servers vet
	$(GO) test $(GOTESTFLAGS) ./...
	cd systest && $(GO) test $(GOTESTFLAGS) ./...
	cd crosscheck && $(GO) test $(GOTESTFLAGS) ./...

# The timing-sensitive packages under a CPU hog that keeps every core busy,
# RUNS times in a row (default 5); stops at the first failure.
RUNS ?= 5
test-stress: servers
	RUNS=$(RUNS) bash scripts/test-stress.sh

# Installs the servers the tests start (redis-server, ...) when missing.
servers:
	bash scripts/install-servers.sh

STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.6.1

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd crosscheck && $(GO) vet ./...
	cd systest && $(GO) vet ./...
	$(STATICCHECK) ./...
	cd systest && $(STATICCHECK) ./...
	bash scripts/check-deps.sh

bench: servers
	cd bench && $(GO) run ./cmd/lockbench

bench-quick: servers
	cd bench && $(GO) run ./cmd/lockbench -quick

# The dashboard's page speed: 10,000 jobs, a million run records on SQLite
# (recording them takes a minute or two), every page timed cold and warm.
bench-dashboard:
	$(GO) test -run X -bench PageSpeed -benchtime 20x ./dashboard/

# Refreshes the README's dashboard screenshots (docs/screenshots) with the
# browser test in the systest module; needs chromium (make servers).
screenshots:
	cd systest && TASKLOCK_SCREENSHOTS=1 $(GO) test -count=1 -run DashboardInBrowser ./cli/

fmt:
	gofmt -w $$(git ls-files '*.go')

# go mod tidy for the library and the modules beside it.
tidy:
	$(GO) mod tidy
	cd systest && $(GO) mod tidy
	cd crosscheck && $(GO) mod tidy
	cd bench && $(GO) mod tidy
