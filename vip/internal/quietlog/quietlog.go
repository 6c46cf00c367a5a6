// Package quietlog gives the embedded BGP servers a logger that drops
// records below a level: gobgp logs every update at info.
package quietlog

import (
	"context"
	"log/slog"
)

// New returns a logger that writes log's records at min and above.
func New(log *slog.Logger, min slog.Level) *slog.Logger {
	return slog.New(minLevel{Handler: log.Handler(), min: min})
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
