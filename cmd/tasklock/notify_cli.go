//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
)

// notifyCLIPages bounds the audit pages jobs notifications reads.
const notifyCLIPages = 20

// jobsNotifications is jobs notifications: the delivery log of serve's
// notifications, newest first, as GET /api/notifications lists it.
func jobsNotifications(ctx context.Context, a *adminArgs, l ledger.Ledger, job string, limit int, w io.Writer) error {
	cat, ok := l.(ledger.Catalog)
	if !ok {
		return fmt.Errorf("%s keeps no audit list, where the delivery log is kept", redact.URL(a.store))
	}
	ds, _, err := apijson.ReadDeliveries(ctx, cat, job, 0, limit, notifyCLIPages)
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(w, map[string]any{"notifications": ds})
	}
	if len(ds) == 0 {
		fmt.Fprintln(w, "no notifications")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tJOB\tEVENT\tTICK\tTARGET\tATTEMPT\tRESULT\tCODE\tERROR\tNODE")
	for _, d := range ds {
		code := "-"
		if d.Code != 0 {
			code = strconv.Itoa(d.Code)
		}
		result := d.Result
		if d.NextRetry != nil {
			result += " (next " + d.NextRetry.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", d.At.UTC().Format(time.RFC3339), redact.Printable(d.Job), d.Event,
			d.Tick.UTC().Format(time.RFC3339), redact.Printable(d.Target), d.Attempt, result, code, redact.Printable(d.Error), redact.Printable(d.Node))
	}
	return tw.Flush()
}
