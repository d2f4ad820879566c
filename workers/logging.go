package workers

import (
	"fmt"
	"log/slog"

	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds the process logger: console to stderr at level
// ("debug", "info", "warn", "error"), or JSON when json is set.
func NewLogger(level string, json bool) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	cfg := zap.NewDevelopmentConfig()
	if json {
		cfg = zap.NewProductionConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	return cfg.Build()
}

// SDKLogger adapts zap to the Temporal SDK's logger, through slog.
func SDKLogger(z *zap.Logger) sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(zapslog.NewHandler(z.Core())))
}
