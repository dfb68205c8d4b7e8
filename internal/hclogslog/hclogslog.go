// Package hclogslog routes log/slog records into an hclog.Logger, so that libraries that
// log with slog (the feeder, the observation layer) reach the Nomad Autoscaler's log when
// they run inside a plugin: a plugin's stderr is not the host's log, its hclog logger is.
package hclogslog

import (
	"context"
	"log/slog"

	hclog "github.com/hashicorp/go-hclog"
)

// New returns a slog.Logger that writes through l (levels mapped, attributes and groups
// flattened to "group.key" pairs).
func New(l hclog.Logger) *slog.Logger { return slog.New(&handler{l: l, min: slog.LevelDebug}) }

// NewMin is New that also drops records below min (for chatty libraries).
func NewMin(l hclog.Logger, min slog.Level) *slog.Logger {
	return slog.New(&handler{l: l, min: min})
}

type handler struct {
	l      hclog.Logger
	min    slog.Level
	attrs  []any
	prefix string
}

func level(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}

// Enabled implements slog.Handler.
func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.min && h.l.GetLevel() <= level(l)
}

// Handle implements slog.Handler.
func (h *handler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = appendAttr(args, h.prefix, a)
		return true
	})
	h.l.Log(level(r.Level), r.Message, args...)
	return nil
}

// WithAttrs implements slog.Handler.
func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &handler{l: h.l, min: h.min, prefix: h.prefix, attrs: append([]any(nil), h.attrs...)}
	for _, a := range as {
		n.attrs = appendAttr(n.attrs, h.prefix, a)
	}
	return n
}

// WithGroup implements slog.Handler.
func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{l: h.l, min: h.min, attrs: h.attrs, prefix: h.prefix + name + "."}
}

func appendAttr(args []any, prefix string, a slog.Attr) []any {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return args
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			args = appendAttr(args, p, g)
		}
		return args
	}
	switch a.Value.Kind() {
	case slog.KindInt64, slog.KindUint64:
		// A plugin's hclog lines reach the host as JSON, whose numbers it reads back as
		// float64: 1099511627794 (a trial's epoch) would print as 1.099511627794e+12.
		return append(args, prefix+a.Key, a.Value.String())
	}
	return append(args, prefix+a.Key, a.Value.Any())
}
