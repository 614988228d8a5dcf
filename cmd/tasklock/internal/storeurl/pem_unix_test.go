//go:build unix

package storeurl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTLSFilesNotFIFO: a certificate or key file that is a FIFO is a bad
// URL naming the parameter and the path. Opening one for reading blocked
// until something opened it for writing: forever, for a mistyped path.
func TestTLSFilesNotFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ raw, param string }{
		{"rediss://127.0.0.1:1?tls_ca_file=" + fifo, "tls_ca_file"},
		{"etcds://127.0.0.1:1?tls_ca_file=" + fifo, "tls_ca_file"},
		{"etcds://127.0.0.1:1?tls_cert_file=" + fifo + "&tls_key_file=" + fifo, "tls_cert_file"},
		{"postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=" + fifo, "sslrootcert"},
	} {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := Open(ctx, tc.raw)
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			// Let the blocked open go, so that the test can end.
			if w, werr := os.OpenFile(fifo, os.O_WRONLY, 0); werr == nil {
				w.Close()
			}
			<-done
			t.Fatalf("Open(%s) still blocked after 30s on the FIFO", tc.raw)
		}
		want := fmt.Sprintf("query parameter %s: %s is not a regular file", tc.param, fifo)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("Open(%s): %v; want a bad URL saying %q", tc.raw, err, want)
		}
	}
}
