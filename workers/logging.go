package workers

import (
	"fmt"
	"io"
	"log/slog"
	"math"

	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds the process logger: console to stderr at level
// ("debug", "info", "warn", "error"), or JSON when json is set.
func NewLogger(level string, json bool) (*zap.Logger, error) {
	cfg, err := loggerConfig(level, json)
	if err != nil {
		return nil, err
	}
	return cfg.Build()
}

// loggerConfig is NewLogger's configuration: no stack traces, and JSON
// with ISO 8601 timestamps (zap's production default is epoch seconds).
func loggerConfig(level string, json bool) (zap.Config, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return zap.Config{}, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	cfg := zap.NewDevelopmentConfig()
	if json {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig = jsonEncoderConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	return cfg, nil
}

// jsonEncoderConfig is the fields of NewLogger's JSON lines.
func jsonEncoderConfig() zapcore.EncoderConfig {
	c := zap.NewProductionEncoderConfig()
	c.EncodeTime = zapcore.ISO8601TimeEncoder
	return c
}

// NewJSONLogger writes NewLogger's JSON lines to w, at every level: for
// the line a command ends on (main's error), which a log shipper parsing
// --log-json output must not drop.
func NewJSONLogger(w io.Writer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(jsonEncoderConfig()), zapcore.AddSync(w), zapcore.DebugLevel))
}

// SDKLogger adapts zap to the Temporal SDK's logger, through slog. It adds
// no stack traces: zapslog's default adds one to every Error record — an
// expected activity failure (a peer lost) came with a screenful of SDK
// frames — whatever the zap logger's own setting.
func SDKLogger(z *zap.Logger) sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(zapslog.NewHandler(z.Core(), zapslog.AddStacktraceAt(slog.Level(math.MaxInt)))))
}
