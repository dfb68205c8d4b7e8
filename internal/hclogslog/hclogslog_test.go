package hclogslog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	hclog "github.com/hashicorp/go-hclog"
)

func TestRoutesLevelsAndAttributes(t *testing.T) {
	var buf bytes.Buffer
	l := New(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}))
	l.Debug("hidden")
	l.With("job", "pdf").WithGroup("op").Warn("stale metrics", "name", "ocr", "age_s", 12)
	out := buf.String()
	if strings.Contains(out, "hidden") {
		t.Fatalf("debug record passed an info logger: %q", out)
	}
	NewMin(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug}), slog.LevelWarn).Info("chatty")
	if strings.Contains(buf.String(), "chatty") {
		t.Fatalf("NewMin(warn) passed an info record: %q", buf.String())
	}
	out = buf.String()
	for _, want := range []string{"[WARN]", "stale metrics", "job=pdf", "op.name=ocr", "op.age_s=12"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output %q lacks %q", out, want)
		}
	}
}
