package soakbench

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses: fields count from the last ')'.
	line := "4242 (trident (p1) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 517 93 0 0 20 0 12 0 8123 1459617792 9645 18446744073709551615\n"
	u, s, err := ParseStat(line)
	if err != nil || u != 517 || s != 93 {
		t.Fatalf("ParseStat = %d, %d, %v; want 517, 93", u, s, err)
	}
	for _, bad := range []string{"", "4242 trident S 1", "4242 (trident) S 1 2 3", "4242 (t) S 1 4242 4242 0 -1 0 0 0 0 0 x 93 0"} {
		if _, _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
	// This process's own stat parses.
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if _, _, err := ParseStat(string(b)); err != nil {
		t.Fatalf("/proc/self/stat: %v", err)
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\ttrident\nVmPeak:\t 1425392 kB\nVmHWM:\t   40000 kB\nVmRSS:\t   38580 kB\nRssAnon:\t   20000 kB\n"
	got, err := ParseVmRSS(status)
	if err != nil || got != 38580*1024 {
		t.Fatalf("ParseVmRSS = %d, %v; want %d", got, err, 38580*1024)
	}
	if anon, err := parseStatusKB(status, "RssAnon"); err != nil || anon != 20000*1024 {
		t.Fatalf("RssAnon = %d, %v; want %d", anon, err, 20000*1024)
	}
	for _, bad := range []string{"Name:\tzombie\nState:\tZ (zombie)\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := ParseVmRSS(bad); err == nil {
			t.Errorf("ParseVmRSS(%q): no error", bad)
		}
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if v, err := ParseVmRSS(string(b)); err != nil || v == 0 {
		t.Fatalf("/proc/self/status: %d, %v", v, err)
	}
}

func TestArithmetic(t *testing.T) {
	const iv = 2 * time.Second
	for _, tc := range []struct {
		count   uint64
		elapsed time.Duration
		per     float64
		atMost1 bool
	}{
		{60, 2 * time.Minute, 1, true},
		{61, 2 * time.Minute, 61.0 / 60, true},  // a window of 60 intervals may hold 61 ticks
		{62, 2 * time.Minute, 62.0 / 60, false}, // not 62
		{5, 11 * time.Second, 5 / 5.5, true},
		{7, 11 * time.Second, 7 / 5.5, false}, // floor(5.5)+1 = 6
		{0, 0, 0, true},
	} {
		if got := PerInterval(tc.count, tc.elapsed, iv); math.Abs(got-tc.per) > 1e-9 {
			t.Errorf("PerInterval(%d, %v) = %v, want %v", tc.count, tc.elapsed, got, tc.per)
		}
		if got := AtMostOnePerInterval(tc.count, tc.elapsed, iv); got != tc.atMost1 {
			t.Errorf("AtMostOnePerInterval(%d, %v) = %v, want %v", tc.count, tc.elapsed, got, tc.atMost1)
		}
	}
	// 2.4 s of CPU time at 100 ticks/s over 2 minutes is 2 % of one core.
	if got := CPUPercent(240, 100, 2*time.Minute); math.Abs(got-2) > 1e-9 {
		t.Errorf("CPUPercent = %v, want 2", got)
	}
	if CPUPercent(10, 100, 0) != 0 || Ratio(5, 0) != 0 || Growth(0, 5) != 0 {
		t.Error("zero denominators must give 0, not NaN or Inf")
	}
	if got := Ratio(45, 15); got != 3 {
		t.Errorf("Ratio(45, 15) = %v, want 3", got)
	}
	if got := Growth(100, 110); math.Abs(got-0.1) > 1e-12 {
		t.Errorf("Growth(100, 110) = %v, want 0.1", got)
	}
	if got := Growth(100, 80); math.Abs(got+0.2) > 1e-12 {
		t.Errorf("Growth(100, 80) = %v, want -0.2", got)
	}
}

// The goals and the RESULT line of a synthetic report: figures are judged as documented
// and the line encodes (no NaN).
func TestGoalsAndResult(t *testing.T) {
	const mb = 1 << 20
	idle := Phase{Name: "idle", Interval: 2 * time.Second, Elapsed: 2 * time.Minute, Leader: "p1", Leaders: []string{"p1"},
		Rounds: 61, Solves: 61, NomadRequests: 183, CPU: []float64{1.5, 0.4, 0.4},
		RSSStart: []uint64{40 * mb, 35 * mb, 35 * mb}, RSSEnd: []uint64{40 * mb, 35 * mb, 35 * mb}, RSSMax: []uint64{41 * mb, 36 * mb, 36 * mb}}
	busy := idle
	busy.Name, busy.Rounds, busy.CPU = "busy", 80, []float64{3, 1, 1}
	idle.RSSWarm = idle.RSSStart
	busy.RSSStart = []uint64{40 * mb, 35 * mb, 35 * mb}
	busy.RSSWarm = []uint64{40 * mb, 35 * mb, 35 * mb}
	busy.RSSEnd = []uint64{45 * mb, 36 * mb, 35 * mb} // p1 +12.5 % after the busy phase's warm-up
	busy.AnonWarm = []uint64{10 * mb, 8 * mb, 8 * mb}
	busy.AnonEnd = []uint64{10*mb + mb/2, 8 * mb, 8 * mb} // p1 +5 % of private memory
	r := &Report{Servers: []string{"p1", "p2", "p3"}, ClockTick: 100, Phases: []Phase{idle, busy},
		Options: Options{Interval: 2 * time.Second, Sample: 2 * time.Second, Settle: 10 * time.Second, Warmup: time.Minute},
		Oversize: []OversizeRequest{
			{Target: "leader", Server: "p1", Code: 413, Latency: time.Millisecond},
			{Target: "follower", Server: "p2", Code: 413, Latency: 3 * time.Millisecond},
			{Target: "leader", Server: "p1", Chunked: true, Code: 413, Latency: 40 * time.Millisecond},
		},
		OversizeRSS: [][4]uint64{{45 * mb, 45 * mb, 47 * mb, 46 * mb}, {36 * mb, 36 * mb, 36 * mb, 36 * mb}, {35 * mb, 35 * mb, 35 * mb, 35 * mb}},
		Raft:        [][4]int64{{65536, 65536, 131072, 131072}, {65536, 65536, 131072, 131072}, {65536, 65536, 131072, 131072}},
	}
	want := map[string]bool{"idle_rounds": true, "idle_cpu": true, "rss_flat": false, "oversize_413": true, "oversize_rss": true}
	for _, g := range r.Goals() {
		if w, ok := want[g.Key]; !ok || w != g.Met {
			t.Errorf("goal %s (%s): met %v, want %v", g.Key, g.Figure, g.Met, w)
		}
		delete(want, g.Key)
	}
	if len(want) > 0 {
		t.Errorf("goals missing: %v", want)
	}
	b, err := json.Marshal(r.Result())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"idle.rounds_per_interval":1.02`, `"idle.nomad_requests_per_round":3`, `"goal.rss_flat":"NOT met"`, `"rss.p1.change_pct":12.5`, `"rss.p1.drift_after_warmup_pct":12.5`, `"rss.p1.anon_drift_after_warmup_pct":5`, `"oversize.answered_413":3`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("RESULT lacks %s: %s", s, b)
		}
	}
	var sb strings.Builder
	for _, tb := range r.Tables() {
		if err := tb.Write(&sb); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(sb.String(), "NOT met") {
		t.Errorf("tables do not show the goal not met:\n%s", sb.String())
	}

	// A step to the busy phase's working set within its warm-up is not drift: 40 -> 45
	// MiB in the first minute, then 45 -> 46 MiB (+2.2 %) is met, while the whole soak
	// changed +15 %; 45 -> 50 MiB after the warm-up (+11.1 %) is not.
	r.Phases[1].RSSWarm = []uint64{45 * mb, 35 * mb, 35 * mb}
	r.Phases[1].RSSEnd = []uint64{46 * mb, 35 * mb, 35 * mb}
	for _, tc := range []struct {
		end  uint64
		met  bool
		text string
	}{{46 * mb, true, "+2.2 % (p1); over the whole soak, warm-up included, +15.0 %"}, {50 * mb, false, "+11.1 % (p1)"}} {
		r.Phases[1].RSSEnd[0] = tc.end
		for _, g := range r.Goals() {
			if g.Key == "rss_flat" && (g.Met != tc.met || !strings.Contains(g.Figure, tc.text)) {
				t.Errorf("busy end %d MiB: rss_flat met %v (%s), want %v and %q", tc.end/mb, g.Met, g.Figure, tc.met, tc.text)
			}
		}
	}

	// A leader change during the idle phase voids the idle CPU goal (the figure is the
	// first leader's).
	r.Phases[0].Leaders = []string{"p1", "p2"}
	for _, g := range r.Goals() {
		if g.Key == "idle_cpu" && g.Met {
			t.Errorf("idle CPU goal met despite a leader change: %s", g.Figure)
		}
	}
}

// sendOversize measures the answer of a server that refuses a Content-Length above its
// limit without reading the body, and of one that reads a chunked body up to the limit.
func TestSendOversize(t *testing.T) {
	const limit = 4 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	body := oversizePayload()
	if len(body) != OversizeBody || !json.Valid(body) {
		t.Fatalf("payload: %d bytes, valid JSON %v", len(body), json.Valid(body))
	}
	for _, chunked := range []bool{false, true} {
		code, lat, msg, err := sendOversize(context.Background(), srv.URL, "soak", body, chunked)
		if err != nil || code != http.StatusRequestEntityTooLarge || lat <= 0 || msg != "too large" {
			t.Errorf("chunked=%v: HTTP %d %q after %v, err %v; want 413", chunked, code, msg, lat, err)
		}
	}
}
