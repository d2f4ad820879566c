package workers

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestSDKLoggerNoStacktrace: the SDK's Error logs (an activity failed)
// reach the log without a Go stack trace; nor do its other levels.
func TestSDKLoggerNoStacktrace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   func(l sdklog.Logger)
		level zapcore.Level
	}{
		{"error", func(l sdklog.Logger) {
			l.Error("Activity error.", "Error", "peer lost")
		}, zapcore.ErrorLevel},
		{"warn", func(l sdklog.Logger) {
			l.Warn("Failed to poll", "Error", "unavailable")
		}, zapcore.WarnLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			tc.log(SDKLogger(zap.New(core)))
			all := logs.All()
			if len(all) != 1 {
				t.Fatalf("%d entries logged, want 1", len(all))
			}
			if e := all[0]; e.Level != tc.level || e.Stack != "" {
				t.Errorf("logged at %v with stack %q; want %v and no stack", e.Level, e.Stack, tc.level)
			}
		})
	}
}

// TestJSONTimestamps: --log-json lines carry ISO 8601 times, not epoch
// seconds, in NewLogger's and NewJSONLogger's lines alike.
func TestJSONTimestamps(t *testing.T) {
	at := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		encoder func() zapcore.Encoder
		want    string // the "ts" value
	}{
		{"NewLogger --log-json", func() zapcore.Encoder {
			cfg, err := loggerConfig("info", true)
			if err != nil {
				t.Fatal(err)
			}
			return zapcore.NewJSONEncoder(cfg.EncoderConfig)
		}, "2026-03-01T08:00:00.000Z"},
		{"NewJSONLogger", func() zapcore.Encoder { return zapcore.NewJSONEncoder(jsonEncoderConfig()) },
			"2026-03-01T08:00:00.000Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf, err := tc.encoder().EncodeEntry(zapcore.Entry{Level: zapcore.InfoLevel, Time: at, Message: "m"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("%s: %v", buf, err)
			}
			if line["ts"] != tc.want {
				t.Errorf("ts %v (%T), want %q", line["ts"], line["ts"], tc.want)
			}
		})
	}
	var b bytes.Buffer
	NewJSONLogger(&b).Error("cann-train: boom")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "cann-train: boom" || line["level"] != "error" {
		t.Errorf("NewJSONLogger wrote %q (%v); want one JSON line at error level", b.String(), err)
	}
	if _, err := loggerConfig("loud", true); err == nil {
		t.Error("log level loud accepted")
	}
}
