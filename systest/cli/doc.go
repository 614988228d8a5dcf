// Package cli holds the tests of the tasklock command that need tooling the
// library module must not require: the dashboard of a running tasklock serve
// driven in headless Chromium (chromedp: TestDashboardInBrowser, which also
// takes the README's screenshots with TASKLOCK_SCREENSHOTS=1, and
// TestDashboardInBrowserReadOnly), and tasklock exec with the network to
// Redis blackholed by the embedded toxiproxy (TestExecBlackholeKillsBeforeExpiry).
//
// Like cmd/tasklock's own tests, they build the tasklock binary once per
// test binary (TestMain) and run it as a process. They live here, not beside
// the command, for the reason in the systest module's doc: go mod tidy in a
// program that imports a tasklock package loads that package's tests, so
// chromedp or toxiproxy imported there would reach every user's go.sum. The
// package has no code of its own, only tests.
package cli
