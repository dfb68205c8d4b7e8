package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/sim/worker"
)

// oomExitCode is the exit status of an operator that exceeded its device memory, as if the
// kernel had OOM-killed it (128+SIGKILL).
const oomExitCode = 137

// envOr returns the first non-empty environment variable among keys, else def.
func envOr(def string, keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return def
}

// envNumbers reads numeric flag defaults from the environment and remembers the values
// that do not parse, so a malformed variable is an error rather than a silent default.
type envNumbers struct{ errs []error }

// lookup returns the first non-empty variable among keys and its name.
func (e *envNumbers) lookup(keys []string) (key, val string) {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return k, v
		}
	}
	return "", ""
}

// Float returns the first non-empty variable among keys as a float, else def.
func (e *envNumbers) Float(def float64, keys ...string) float64 {
	k, v := e.lookup(keys)
	if k == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not a number", k, v))
		return def
	}
	return f
}

// Int returns the first non-empty variable among keys as an integer, else def.
func (e *envNumbers) Int(def int, keys ...string) int {
	k, v := e.lookup(keys)
	if k == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: not an integer", k, v))
		return def
	}
	return n
}

// Err reports every malformed variable read.
func (e *envNumbers) Err() error { return errors.Join(e.errs...) }

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func parseStorage(s string) (jetstream.StorageType, error) {
	switch s {
	case "file":
		return jetstream.FileStorage, nil
	case "memory":
		return jetstream.MemoryStorage, nil
	}
	return 0, fmt.Errorf("-storage %q: want file or memory", s)
}

const operatorUsage = `usage: trident operator [flags]

Runs one instance of a simulated pipeline operator (-role worker, the default) or the embedded
NATS JetStream server of the example pipelines (-role nats-server). Every flag defaults to the
environment Nomad gives a raw_exec task, so a job file only needs -pipeline/-stage:

  -stage          TRIDENT_STAGE, NOMAD_META_trident_operator (planner-rendered groups), NOMAD_GROUP_NAME
  -config         TRIDENT_CONFIG, NOMAD_META_trident_config       "k=v,k=v"
  -epoch          TRIDENT_CONFIG_EPOCH, NOMAD_META_trident_config_epoch
  -metrics-addr   NOMAD_ADDR_metrics, else 127.0.0.1:NOMAD_PORT_metrics (host:port of /metrics)
  -cpus           NOMAD_META_trident_cpu
  -device-memory-mb TRIDENT_DEVICE_MEMORY_MB, NOMAD_META_trident_gpu_memory_mb
  -state-dir      NOMAD_ALLOC_DIR           (the OOM counter survives task restarts)
  -nats           TRIDENT_NATS_URL          (default nats://127.0.0.1:4222)
  -speed          TRIDENT_SPEED             (divides every model service time)
  -queue-cap      TRIDENT_QUEUE_CAP         (bound of the stage's input queue; 0 = unbounded)
  -nats-port      NOMAD_PORT_nats           (-role nats-server)

With -queue-cap N the stage's input queue (records undelivered + in service, over all its
instances) is bounded: the stage announces N in the NATS KV bucket trident_queue_caps and the
upstream stages hold their outputs while it is full. The bound is soft: each upstream instance
can overshoot it by the outputs of one completion, plus what other upstream instances publish
before its next backlog read (every 250 ms). The instance then exports
trident_queue_capacity (N / live instances); every instance exports
trident_output_blocked_seconds_total.

Exit status 137 means the operator exceeded its device memory (a simulated OOM kill).

flags:
`

// runOperator runs one operator instance or the embedded nats-server until ctx ends.
func runOperator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	env := &envNumbers{}
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, operatorUsage); fs.PrintDefaults() }
	role := fs.String("role", "worker", "worker | nats-server")
	pipeline := fs.String("pipeline", envOr("", "TRIDENT_PIPELINE"), "pipeline: pdf, pdfmini or video")
	stage := fs.String("stage", envOr("", "TRIDENT_STAGE", "NOMAD_META_"+opcontract.MetaOperator, "NOMAD_GROUP_NAME"), "operator name within the pipeline")
	natsURL := fs.String("nats", envOr("nats://127.0.0.1:4222", "TRIDENT_NATS_URL"), "NATS URL")
	config := fs.String("config", envOr("", "TRIDENT_CONFIG", "NOMAD_META_"+opcontract.MetaConfig), "config overrides k=v,k=v")
	epoch := fs.Int64("epoch", int64(env.Int(0, "TRIDENT_CONFIG_EPOCH", "NOMAD_META_"+opcontract.MetaConfigEpoch)), "config epoch exported with the metrics")
	speed := fs.Float64("speed", env.Float(1, "TRIDENT_SPEED"), "speed-up factor of the simulated service times")
	cpus := fs.Float64("cpus", env.Float(0, "NOMAD_META_"+opcontract.MetaCPU), "cores of this instance (0 = the operator's declared need)")
	devMem := fs.Float64("device-memory-mb", env.Float(0, "TRIDENT_DEVICE_MEMORY_MB", "NOMAD_META_"+opcontract.MetaGPUMemoryMB), "accelerator memory in MiB (0 = the operator's declared need)")
	defMetrics := envOr("", "NOMAD_ADDR_metrics")
	if port := os.Getenv("NOMAD_PORT_metrics"); defMetrics == "" && port != "" {
		defMetrics = "127.0.0.1:" + port
	}
	metricsAddr := fs.String("metrics-addr", defMetrics, "host:port serving /metrics (empty = none)")
	stateDir := fs.String("state-dir", envOr("", "NOMAD_ALLOC_DIR"), "directory kept across restarts (OOM counter)")
	batchWait := fs.Duration("batch-wait", 200*time.Millisecond, "how long an idle operator waits to fill a batch")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "JetStream ack wait of the stage consumer")
	storage := fs.String("storage", "file", "stream storage if this instance creates it: file | memory")
	queueCap := fs.Int("queue-cap", env.Int(0, "TRIDENT_QUEUE_CAP"), "bound of this stage's input queue in records, undelivered + in service, shared by all its instances; upstream stages wait while it is full (0 = unbounded)")
	crash := fs.Int("crash-after-publish", 0, "fault injection: exit 137 after publishing the outputs of the n-th completion, before acking it")
	natsPort := fs.Int("nats-port", env.Int(4222, "NOMAD_PORT_nats"), "nats-server: client port on 127.0.0.1")
	httpPort := fs.Int("nats-http-port", env.Int(0, "NOMAD_PORT_nats_http"), "nats-server: monitoring port on 127.0.0.1 (0 = none)")
	storeDir := fs.String("store-dir", "", "nats-server: JetStream store (default $NOMAD_ALLOC_DIR/trident-jetstream, else $TMPDIR/trident-jetstream)")
	logLevel := fs.String("log-level", "info", "debug | info | warn | error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := env.Err(); err != nil {
		return fmt.Errorf("operator environment: %w", err)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	switch *role {
	case "nats-server":
		dir := *storeDir
		if dir == "" {
			dir = filepath.Join(envOr(os.TempDir(), "NOMAD_ALLOC_DIR"), "trident-jetstream")
		}
		return worker.RunNATSServer(ctx, worker.NATSOptions{Host: "127.0.0.1", Port: *natsPort, HTTPPort: *httpPort, StoreDir: dir}, log)
	case "worker":
	default:
		return fmt.Errorf("-role %q: want worker or nats-server", *role)
	}
	if *queueCap < 0 {
		return fmt.Errorf("-queue-cap %d: want 0 (unbounded) or a positive number of records", *queueCap)
	}
	if *pipeline == "" || *stage == "" {
		return errors.New("-pipeline and -stage are required (or TRIDENT_PIPELINE and NOMAD_GROUP_NAME)")
	}
	p, err := worker.LookupPipeline(*pipeline)
	if err != nil {
		return err
	}
	cfg, err := worker.ParseConfig(strings.TrimSpace(*config))
	if err != nil {
		return fmt.Errorf("-config: %w", err)
	}
	st, err := parseStorage(*storage)
	if err != nil {
		return err
	}
	err = worker.Run(ctx, worker.Options{
		Pipeline: p, Stage: *stage, NATSURL: *natsURL, Config: cfg, Epoch: *epoch,
		Speed: *speed, CPUs: *cpus, DeviceMemoryMiB: *devMem, MetricsAddr: *metricsAddr,
		StateDir: *stateDir, BatchWait: *batchWait, AckWait: *ackWait, Storage: st,
		CrashAfterPublish: *crash, Instance: os.Getenv("NOMAD_ALLOC_ID"), Log: log, QueueCap: *queueCap,
		DeviceUsageDir: os.Getenv(opcontract.EnvGPUUsageDir), VisibleDevices: os.Getenv(opcontract.EnvVisibleDevices),
	})
	var oom *worker.OOMError
	if errors.As(err, &oom) || errors.Is(err, worker.ErrInjectedCrash) {
		log.Error("operator killed", "err", err, "exit", oomExitCode)
		os.Exit(oomExitCode) // the CLI contract: a simulated kill exits like one
	}
	return err
}

// connectWithin connects to NATS, giving up after 30 s.
func connectWithin(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return worker.Connect(cctx, url, name, log)
}
