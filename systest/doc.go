// Package systest holds the tests that need tooling the library must not
// require: network faults through an embedded toxiproxy (internal/proxy) —
// each store's blackhole and cut-connection tests —, the dashboard driven
// in headless Chromium (chromedp), and the dashboard's answers checked
// against its OpenAPI document (kin-openapi, in openapi/).
//
// It is a module of its own, beside the library and wired to it with a
// replace directive, because go mod tidy in a program that imports a
// tasklock package also loads that package's tests: a toxiproxy or chromedp
// import in a store's tests would put them, and what they pull in, into
// every user's go.sum. Everything else — the stores' conformance, kill and
// pause tests — stays beside the code it tests. make test runs both.
package systest
