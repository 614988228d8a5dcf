package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tasklock/tasklock/internal/redact"
)

const healthUsage = `Usage: tasklock health [--http ADDR] [--ready] [--timeout D]

Asks a running "tasklock serve --http ADDR" how it is: GET
http://ADDR/healthz (is it alive), or with --ready GET /readyz (does its
store answer, with the ledger's tables in place). For container health
checks and scripts where there is no curl (the image FROM scratch). It
needs no token: neither endpoint asks for one.

Flags:
  --http ADDR    serve's --http address (default 127.0.0.1:8080); a
                 wildcard host (0.0.0.0, [::] or none, as in :8080) is
                 asked on this host's loopback
  --ready        ask /readyz instead of /healthz
  --timeout D    give up after D (default 5s)

It prints the answer's body. Exit status: 0 when the answer is 200 OK; 69
when it is another status (the body says why) or none came within
--timeout (the error is printed); 64 for bad flags.
`

// runHealth is the health command: a probe of serve's /healthz or /readyz.
func runHealth(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("http", defaultHTTP, "")
	ready := fs.Bool("ready", false, "")
	timeout := fs.Duration("timeout", 5*time.Second, "")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, healthUsage)
		return exitOK
	case err != nil:
		err = flagError(fs, err)
	case fs.NArg() > 0:
		err = usagef("unexpected argument %s", redact.Quote(fs.Arg(0)))
	case *timeout <= 0:
		err = usagef("--timeout %v: want a positive duration such as 5s", *timeout)
	default:
		err = checkDurations(fs)
	}
	var url string
	if err == nil {
		url, err = healthURL(*addr, *ready)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock health: %v\nRun 'tasklock help health' for usage.\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "tasklock health: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "tasklock health: %v\n", err)
		return exitUnavailable
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		fmt.Fprintf(stderr, "tasklock health: GET %s: reading the answer: %v\n", url, err)
		return exitUnavailable
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "tasklock health: GET %s: %s\n", url, resp.Status)
		return exitUnavailable
	}
	return exitOK
}

// splitHTTPAddr splits serve's and health's --http HOST:PORT, refusing as
// usage errors what no listener or dialer could take: a host with control
// characters, a port that is neither 0 to 65535 nor a service name. hint
// ends the message of an address without a port. The messages hide the
// password of a URL given for HOST:PORT.
func splitHTTPAddr(addr, hint string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	shown := redact.Quote(redact.URL(addr))
	switch {
	case err != nil:
		return "", "", usagef("--http %s: want HOST:PORT, e.g. 127.0.0.1:8080%s", shown, hint)
	case redact.CheckName(host) != "":
		return "", "", usagef("--http %s: the host %s", shown, redact.CheckName(host))
	case port != "":
		if _, err := net.LookupPort("tcp", port); err != nil {
			return "", "", usagef("--http %s: invalid port %s, want 0 to 65535", shown, redact.Quote(port))
		}
	}
	return host, port, nil
}

// healthURL is the URL of serve's /healthz (or /readyz when ready) for
// its --http address addr; a wildcard host is asked on loopback.
func healthURL(addr string, ready bool) (string, error) {
	host, port, err := splitHTTPAddr(addr, "")
	if err != nil {
		return "", err
	}
	if port == "" {
		return "", usagef("--http %s: want HOST:PORT, e.g. 127.0.0.1:8080", redact.Quote(redact.URL(addr)))
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	path := "/healthz"
	if ready {
		path = "/readyz"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
