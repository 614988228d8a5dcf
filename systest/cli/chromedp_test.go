//go:build unix

package cli

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/chromedp"

	"github.com/tasklock/tasklock/internal/clitest"
)

// chromedpErrors is the error logger of the browser tests' chromedp
// contexts: it logs what chromedp reports (an event it cannot decode, a
// node event it does not handle) through t.Logf, except the one message
// that is only noise against the Chromium these tests run:
//
//   - "unhandled node event *dom.EventTopLayerElementsUpdated": cdproto
//     decodes the event, but chromedp v0.14 has no case for it in its DOM
//     tracking, which needs none (chromedp v0.23 handles it, with an API
//     that no longer has ListenTarget).
//
// The "unknown IPAddressSpace value: Loopback" errors that cdproto
// v0.0.0-20250319 printed for every request (Chromium renamed Local to
// Loopback) are gone with cdproto v0.0.0-20250724, which systest/go.mod
// pins with chromedp v0.14.2.
func chromedpErrors(t *testing.T) chromedp.ContextOption {
	ignored := fmt.Sprintf("unhandled node event %T", &dom.EventTopLayerElementsUpdated{})
	return chromedp.WithErrorf(func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if msg == ignored {
			return
		}
		t.Logf("chromedp: %s", msg)
	})
}

// dashboardURL waits for serve p to log its dashboard and returns its URL.
func dashboardURL(t *testing.T, p *clitest.Proc) string {
	t.Helper()
	p.WaitStderr(`"msg":"dashboard"`, 30*time.Second)
	return regexp.MustCompile(`"url":"([^"]+)"`).FindStringSubmatch(p.Stderr())[1]
}

// newBrowser starts headless Chromium (the binary at chromium, with opts
// such as a window size) and returns a context that drives it for at most
// timeout; chromedp's errors are logged (chromedpErrors). Chromium stops
// when the test ends.
func newBrowser(t *testing.T, chromium string, timeout time.Duration, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	all := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(all, opts...)...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedpErrors(t))
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	return ctx
}
