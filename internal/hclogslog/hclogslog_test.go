package hclogslog

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// Integers cross a plugin's JSON log transport as strings, so the host prints them
// exactly (a JSON number would come back as a float64 in exponent form).
func TestIntegersSurviveTheJSONTransport(t *testing.T) {
	var buf bytes.Buffer
	New(hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true})).Info("trial", "epoch", uint64(1<<40+14), "rounds", -3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("decode %q: %v", buf.String(), err)
	}
	if got := fmt.Sprint(rec["epoch"]); got != "1099511627790" {
		t.Errorf("epoch read back as %q, want 1099511627790", got)
	}
	if got := fmt.Sprint(rec["rounds"]); got != "-3" {
		t.Errorf("rounds read back as %q, want -3", got)
	}
}
