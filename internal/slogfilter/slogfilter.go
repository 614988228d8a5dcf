// Package slogfilter holds the one slog handler wrapper the project needs:
// a level floor in front of another handler.
package slogfilter

import (
	"context"
	"log/slog"
)

// AtLeast returns a handler that passes on to h only the records at min or
// above (and that h itself would take). The library's defaults use it so
// that a library warns and no more unless asked; tasklock serve gives it to
// its Schedulers, whose run lines it logs itself.
func AtLeast(h slog.Handler, min slog.Level) slog.Handler {
	return floor{h, min}
}

type floor struct {
	slog.Handler
	min slog.Level
}

func (h floor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h floor) WithAttrs(a []slog.Attr) slog.Handler { return floor{h.Handler.WithAttrs(a), h.min} }

func (h floor) WithGroup(g string) slog.Handler { return floor{h.Handler.WithGroup(g), h.min} }
