package slogfilter

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestAtLeast(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(AtLeast(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), slog.LevelWarn))
	log = log.With("node", "n1").WithGroup("g")
	log.Info("dropped")
	log.Warn("kept", "k", 1)
	out := buf.String()
	if strings.Contains(out, "dropped") || !strings.Contains(out, "kept") || !strings.Contains(out, "node=n1") || !strings.Contains(out, "g.k=1") {
		t.Fatalf("output %q: want only the warning, with the attrs and group", out)
	}
}
