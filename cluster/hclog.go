package cluster

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets raft log through the injected slog.Logger instead of
// its own global-ish hclog output.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHclog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{l: l.With("component", name), name: name}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	a.l.Log(context.Background(), slogLevel(level), msg, args...)
}
func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *hclogAdapter) enabled(l hclog.Level) bool {
	return a.l.Enabled(context.Background(), slogLevel(l))
}
func (a *hclogAdapter) IsTrace() bool         { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool         { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool          { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool          { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool         { return a.enabled(hclog.Error) }
func (a *hclogAdapter) ImpliedArgs() []any    { return a.args }
func (a *hclogAdapter) Name() string          { return a.name }
func (a *hclogAdapter) SetLevel(hclog.Level)  {}
func (a *hclogAdapter) GetLevel() hclog.Level { return hclog.Info }
func (a *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: a.l.With(args...), name: a.name, args: append(append([]any{}, a.args...), args...)}
}
func (a *hclogAdapter) Named(name string) hclog.Logger {
	return &hclogAdapter{l: a.l.With("sub", name), name: a.name + "." + name, args: a.args}
}
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: a.l.With("sub", name), name: name, args: a.args}
}
func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.l.Handler(), slog.LevelInfo)
}
func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
