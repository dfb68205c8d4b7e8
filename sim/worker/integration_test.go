package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/e2e/harness"
)

// childEnv carries a child operator's options when the test binary re-executes itself as a
// real operator process.
const childEnv = "TRIDENT_WORKER_TEST_CHILD"

type childSpec struct {
	Pipeline, Stage, NATS, Metrics string
	Speed                          float64
	Crash                          int
	AckWait                        time.Duration
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// runChild is the body of a child operator process: exit 137 on OOM or injected crash.
func runChild(spec string) int {
	var c childSpec
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := LookupPipeline(c.Pipeline)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err = Run(context.Background(), Options{Pipeline: p, Stage: c.Stage, NATSURL: c.NATS, Speed: c.Speed,
		MetricsAddr: c.Metrics, AckWait: c.AckWait, BatchWait: 50 * time.Millisecond,
		CrashAfterPublish: c.Crash, Log: log})
	var oom *OOMError
	if errors.As(err, &oom) || errors.Is(err, ErrInjectedCrash) {
		return 137
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startChild(t *testing.T, c childSpec) *child {
	t.Helper()
	b, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = testWriter{t, c.Stage}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", c.Stage, err)
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() { ch.err = cmd.Wait(); close(ch.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ch.done
	})
	return ch
}

func (c *child) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Fatalf("child %v did not exit within %v", c.cmd.Args, d)
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// startNATS starts an embedded JetStream server for the test (skipped under -short, the
// `make unit` run that starts no servers) and connects to it.
func startNATS(t *testing.T) (string, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	s, err := StartNATSServer(NATSOptions{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := Connect(ctx, s.ClientURL(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return s.ClientURL(), nc, js
}

func sinkCount(t *testing.T, js jetstream.JetStream, p *Pipeline) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, p.StreamName())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(p.SinkSubject()))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[p.SinkSubject()]
}

// A three-stage PDF pipeline of real operator processes on an embedded JetStream server loses
// and duplicates no record although one operator crashes between publishing its outputs and
// acking its input, and a second is SIGKILLed mid-run; both are restarted.
func TestPipelineSurvivesKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts operator processes")
	}
	url, _, js := startNATS(t)
	p := PDFMiniPipeline()
	spec := Spec{Pipeline: p.Name, Docs: 60, Regimes: 3, Seed: 11}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := Publish(ctx, js, p, spec, PublishOptions{Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	want, err := Expected(p, spec)
	if err != nil {
		t.Fatal(err)
	}
	ackWait := 2 * time.Second // redelivery after a crash
	base := childSpec{Pipeline: p.Name, NATS: url, Speed: 200, AckWait: ackWait}
	with := func(stage string, crash int, metrics string) childSpec {
		c := base
		c.Stage, c.Crash, c.Metrics = stage, crash, metrics
		return c
	}
	metricsAddr := harness.FreeAddr(t)
	startChild(t, with("parse", 0, metricsAddr))
	seg := startChild(t, with("segment", 4, ""))
	agg1 := startChild(t, with("aggregate", 0, ""))
	startChild(t, with("aggregate", 0, ""))

	// segment dies after publishing the blocks of its 4th document, before acking it.
	if code := seg.wait(t, time.Minute); code != 137 {
		t.Fatalf("segment exit code %d, want 137 (injected crash)", code)
	}
	startChild(t, with("segment", 0, ""))

	// Kill one of the two aggregate instances mid-run, then restart it.
	deadline := time.Now().Add(time.Minute)
	for sinkCount(t, js, p) < uint64(len(want)/3) {
		if time.Now().After(deadline) {
			t.Fatalf("sink stuck at %d of %d records", sinkCount(t, js, p), len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := agg1.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	agg1.wait(t, 10*time.Second)
	startChild(t, with("aggregate", 0, ""))

	// Wait until every stage has acked everything (the crashed input was redelivered and
	// re-processed), then check the sink.
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	rep, err := WaitVerify(wctx, js, p, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ok, busy, err := Drained(ctx, js, p); !ok || err != nil {
		t.Fatalf("pipeline not drained: %s %v", busy, err)
	}
	t.Log(rep.String())
	if !rep.OK() || rep.Expected != len(want) || rep.Received != len(want) {
		t.Fatalf("sink not exactly the expected records: %s %v", rep, rep.Samples)
	}

	// The metrics contract is served by the operator process.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{opcontract.RecordsIn, opcontract.RecordsOut, opcontract.BusySeconds,
		opcontract.UsefulSeconds, opcontract.QueueLength, opcontract.AccelUtilization, opcontract.CPUUtilization,
		opcontract.DeviceMemPeak, opcontract.OOMRestarts, opcontract.WorkloadFeature, opcontract.ConfigEpoch} {
		if !strings.Contains(string(body), name+"{") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	wantIn := fmt.Sprintf(`%s{epoch="0",operator="parse",pipeline="pdfmini"} %d`, opcontract.RecordsIn, spec.Docs)
	if !strings.Contains(string(body), wantIn) {
		t.Errorf("/metrics lacks %q:\n%s", wantIn, body)
	}

	// The checker does catch a duplicate: a second sink message for an ID (another Msg-Id).
	var someID string
	for id := range want {
		someID = id
		break
	}
	data, _ := json.Marshal(Record{ID: someID})
	if _, err := js.Publish(ctx, p.SinkSubject(), data, jetstream.WithMsgID("dup-probe")); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(ctx, js, p)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Duplicates != 1 || rep.Missing != 0 {
		t.Fatalf("verifier missed an injected duplicate: %s", rep)
	}
}

// An accelerator operator whose batch exceeds its device memory exits with an OOMError, and
// the OOM counter in its state dir survives the restart.
func TestOOMExitAndCounter(t *testing.T) {
	url, _, js := startNATS(t)
	p := PDFPipeline()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := EnsureStream(ctx, js, p, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	subj := p.Subject("ocr-table")
	for i := range 40 {
		r := Record{ID: fmt.Sprintf("t%02d", i), Kind: "table", Regime: 1,
			Features: map[string]float64{"input_tokens": 3000, "output_tokens": 1200}}
		data, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(MsgID(subj, r.ID))); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	run := func(cfg string) error {
		c, err := ParseConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		defer rcancel()
		return Run(rctx, Options{Pipeline: p, Stage: "ocr-table", NATSURL: url, Config: c, Speed: 1000,
			StateDir: state, AckWait: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	for attempt := 1; attempt <= 2; attempt++ {
		err := run("max_num_seqs=32")
		var oom *OOMError
		if !errors.As(err, &oom) {
			t.Fatalf("attempt %d: err = %v, want OOMError", attempt, err)
		}
		if oom.PeakMiB <= oom.LimitMiB {
			t.Fatalf("OOM with peak %.0f <= limit %.0f", oom.PeakMiB, oom.LimitMiB)
		}
		b, err := os.ReadFile(filepath.Join(state, "trident-oom-pdf-ocr-table.count"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != fmt.Sprint(attempt) {
			t.Fatalf("OOM counter after attempt %d = %s", attempt, got)
		}
	}
}

// Every engine (CPU threads, batched vision, continuous-batching LLM) moves the whole video
// dataset, with its fan-out and filters, to the sink exactly once; on shutdown Run returns nil.
func TestVideoPipelineAllEngines(t *testing.T) {
	url, _, js := startNATS(t)
	p := VideoPipeline()
	spec := Spec{Pipeline: p.Name, Docs: 6, Regimes: 2, Seed: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Publish(ctx, js, p, spec, PublishOptions{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	errs := make(chan error, len(p.Operators))
	for _, op := range p.Operators {
		go func() {
			errs <- Run(runCtx, Options{Pipeline: p, Stage: op.Name, NATSURL: url, Speed: 2000,
				BatchWait: 20 * time.Millisecond, Storage: jetstream.MemoryStorage,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		}()
	}
	rep, err := WaitVerify(ctx, js, p, 100*time.Millisecond)
	stop()
	for range p.Operators {
		if rerr := <-errs; rerr != nil {
			t.Errorf("operator returned %v on shutdown, want nil", rerr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.String())
	if !rep.OK() || rep.Expected == 0 {
		t.Fatalf("video sink: %s %v", rep, rep.Samples)
	}
}

// Live instances of a stage find each other through the presence bucket, so each reports its
// share of the shared backlog; a departed instance stops counting.
func TestPresenceCountsInstances(t *testing.T) {
	_, _, js := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := PDFPipeline()
	op := mustOp(t, p, "layout")
	mk := func(id string) *presence {
		w := &worker{o: Options{Instance: id}, p: p, op: op, js: js}
		pr, err := w.newPresence(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	a, b := mk("a"), mk("b")
	other := &worker{o: Options{Instance: "c"}, p: p, op: mustOp(t, p, "parse"), js: js}
	pc, err := other.newPresence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.beat(ctx); err != nil { // another stage: must not count
		t.Fatal(err)
	}
	if n, err := a.beat(ctx); err != nil || n != 1 {
		t.Fatalf("first instance sees %d (%v), want 1", n, err)
	}
	if n, err := b.beat(ctx); err != nil || n != 2 {
		t.Fatalf("second instance sees %d (%v), want 2", n, err)
	}
	b.leave()
	if n, err := a.beat(ctx); err != nil || n != 1 {
		t.Fatalf("after leave: %d (%v), want 1", n, err)
	}
}
