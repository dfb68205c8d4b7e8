package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/sim/worker"
)

var updateDockerJobs = flag.Bool("update-docker-jobs", false, "rewrite jobs/*-docker.nomad.hcl from the raw_exec job files")

// dockerJobs are the raw_exec example pipelines that have a docker variant.
var dockerJobs = []string{"pdf-curation", "video-curation"}

const dockerJobHeader = `# GENERATED from jobs/%[1]s.nomad.hcl by
#   go test ./e2e -run TestDockerJobFiles -update-docker-jobs
# (edit that file, then regenerate). The same pipeline with every operator in a container of
# the operator image: ` + "`make image`" + ` builds it FROM scratch with a static trident binary,
# whose entrypoint is /trident, so the args start with "operator". Nomad's docker driver runs
# it with host networking: the operator binds the port Nomad assigned, as under raw_exec, and
# reaches NATS on 127.0.0.1. Accelerator groups request nvidia/gpu devices: the device plugin
# sets NVIDIA_VISIBLE_DEVICES, and the docker driver then starts the container with the runtime
# its nvidia_runtime option names (the NVIDIA container runtime on a GPU host). The job keeps
# the name and the service names of the raw_exec file: run one or the other.
#
`

var (
	binVarBlock = regexp.MustCompile(`(?s)variable "trident_bin" \{\n.*?\n\}\n`)
	rawRunLine  = regexp.MustCompile(`(?m)^#   nomad job run -var trident_bin=\$PWD/bin/trident (.*)jobs/([a-z-]+)\.nomad\.hcl$`)
)

// dockerJobFile derives the docker variant of raw_exec job file raw (jobs/<name>.nomad.hcl):
// the trident_bin variable becomes an image variable and every raw_exec task a docker task of
// that image with host networking and the same args.
func dockerJobFile(name, raw string) (string, error) {
	tasks := strings.Count(raw, `driver = "raw_exec"`)
	if tasks == 0 || strings.Count(raw, "        command = var.trident_bin\n        args    = [") != tasks ||
		len(binVarBlock.FindAllString(raw, -1)) != 1 {
		return "", fmt.Errorf("jobs/%s.nomad.hcl: not in the expected shape (%d raw_exec tasks)", name, tasks)
	}
	s := binVarBlock.ReplaceAllString(raw, `variable "image" {
  type        = string
  default     = "trident-operator:dev"
  description = "the operator image (make image)"
}
`)
	s = rawRunLine.ReplaceAllString(s, "#   make image && nomad job run ${1}jobs/${2}-docker.nomad.hcl")
	s = strings.ReplaceAll(s, `driver = "raw_exec"`, `driver = "docker"`)
	s = strings.ReplaceAll(s, "        command = var.trident_bin\n        args    = [",
		"        image        = var.image\n        network_mode = \"host\"\n        args         = [")
	if strings.Contains(s, "trident_bin") {
		return "", fmt.Errorf("jobs/%s.nomad.hcl: trident_bin left after the rewrite", name)
	}
	return fmt.Sprintf(dockerJobHeader, name) + s, nil
}

// The docker job files are the raw_exec ones rewritten (regenerate them with
// -update-docker-jobs), and they validate (nomad job validate, without an agent).
func TestDockerJobFiles(t *testing.T) {
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	nomad, err := harness.ToolPath("nomad")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dockerJobs {
		raw, err := os.ReadFile(filepath.Join(root, "jobs", name+".nomad.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := dockerJobFile(name, string(raw))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, "jobs", name+"-docker.nomad.hcl")
		if *updateDockerJobs {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (generate it: go test ./e2e -run TestDockerJobFiles -update-docker-jobs)", err)
		}
		if string(got) != want {
			t.Errorf("jobs/%s-docker.nomad.hcl is not jobs/%s.nomad.hcl rewritten: regenerate it with go test ./e2e -run TestDockerJobFiles -update-docker-jobs", name, name)
		}
		for _, args := range [][]string{{"fmt", "-check", path}, {"job", "validate", path}} {
			cmd := exec.Command(nomad, args...)
			cmd.Env = append(os.Environ(), "NOMAD_ADDR=http://127.0.0.1:1") // no agent
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
}

// TestPipelineUnderDocker runs the pdfocr pipeline (parse -> segment -> ocr-text ->
// aggregate) of jobs/pdf-curation-docker.nomad.hcl as containers of the operator image under
// Nomad's docker driver, against a dockerd the test starts, with ocr-text on fake GPUs of
// the trident-gpu device plugin. Every expected record reaches the sink exactly once
// (verified by ID); the accelerator containers got NVIDIA_VISIBLE_DEVICES and the "nvidia"
// runtime; the containers serve the operator metrics.
func TestPipelineUnderDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts dockerd, Nomad and NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const image = "trident-operator:e2e"
	d := harness.StartDocker(t) // before Nomad: its agents inherit DOCKER_HOST
	tridentBin := harness.BuildOperatorImage(t, d, image)
	devDir := t.TempDir()
	if err := harness.BuildPackages(ctx, devDir, "./plugins/trident-gpu"); err != nil {
		t.Fatal(err)
	}
	n := harness.StartNomad(t, harness.NomadOptions{
		DevicePluginDir: devDir,
		Clients:         []harness.ClientSpec{{Name: "gpu1", NodeClass: "gpu", FakeGPUs: 2, FakeGPUMemoryMiB: 81920}},
	})
	cl := n.API()
	waitFor(t, 2*time.Minute, "the docker driver on every node", func() (bool, string) {
		nodes, _, err := cl.Nodes().List(nil)
		if err != nil {
			return false, err.Error()
		}
		for _, stub := range nodes {
			if di := stub.Drivers["docker"]; di == nil || !di.Detected || !di.Healthy {
				return false, fmt.Sprintf("node %s: docker driver %+v", stub.Name, di)
			}
		}
		return len(nodes) == 2, fmt.Sprintf("%d nodes", len(nodes))
	})

	natsURL := harness.RunNATS(t, ctx, cl, tridentBin)
	job := pdfocrJob(t, cl, "pdf-curation-docker.nomad.hcl", map[string]string{"image": image, "nats_url": natsURL, "speed": "20"})
	for _, g := range job.TaskGroups {
		if task := g.Tasks[0]; task.Driver != "docker" || task.Config["image"] != image || task.Config["network_mode"] != "host" {
			t.Fatalf("group %s: driver %q config %v, want docker with image %s on the host network", *g.Name, task.Driver, task.Config, image)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	_, js, err := worker.Connect(cctx, natsURL, "e2e-docker", nil)
	ccancel()
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register the docker pipeline: %v", err)
	}
	t.Cleanup(func() {
		// Stop the containers through Nomad before the agents go (dockerd's own shutdown
		// would stop the rest).
		_, _, _ = cl.Jobs().Deregister(*job.ID, true, nil)
	})
	waitFor(t, 5*time.Minute, "every operator running in a container", func() (bool, string) {
		got := runningByOperatorNode(t, cl, *job.ID)
		running := 0
		for _, c := range got {
			running += c
		}
		return running == len(job.TaskGroups), fmt.Sprintf("running %v", got)
	})

	pl, err := worker.LookupPipeline("pdfocr")
	if err != nil {
		t.Fatal(err)
	}
	spec := worker.Spec{Pipeline: "pdfocr", Docs: 60, Regimes: 2, Seed: 11}
	if err := worker.Publish(ctx, js, pl, spec, worker.PublishOptions{Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("publish dataset: %v", err)
	}
	vctx, vcancel := context.WithTimeout(ctx, 8*time.Minute)
	defer vcancel()
	rep, err := worker.WaitVerify(vctx, js, pl, 2*time.Second)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("the sink is not the dataset's records, each once: %s (samples %v)", rep, rep.Samples)
	}
	t.Logf("%s", rep)

	// The operators ran in containers of the image; the GPU operator's containers were
	// given the fake GPUs through NVIDIA_VISIBLE_DEVICES and started with the nvidia runtime.
	ctrs := dockerContainers(t, d)
	gpuCtrs := 0
	for _, c := range ctrs {
		if c.Config.Image != image {
			continue
		}
		stage := argAfter(c.Args, "-stage")
		visible := envValue(c.Config.Env, "NVIDIA_VISIBLE_DEVICES")
		if stage == "ocr-text" {
			gpuCtrs++
			if visible == "" || c.HostConfig.Runtime != "nvidia" {
				t.Errorf("ocr-text container %s: NVIDIA_VISIBLE_DEVICES %q, runtime %q; want the fake GPU and nvidia", c.ID[:12], visible, c.HostConfig.Runtime)
			}
		} else if visible != "" {
			t.Errorf("%s container %s got NVIDIA_VISIBLE_DEVICES %q", stage, c.ID[:12], visible)
		}
	}
	if gpuCtrs == 0 {
		t.Errorf("no ocr-text container of %s among %d containers", image, len(ctrs))
	}
	// Their metrics are the operator contract, served from inside the containers.
	for _, op := range []string{"parse", "ocr-text"} {
		pages := operatorMetrics(t, cl, *job.ID, op)
		if len(pages) == 0 {
			t.Errorf("%s: no /metrics page", op)
			continue
		}
		if v, ok := metricValueIn(pages[0], opcontract.RecordsOut); !ok || v <= 0 {
			t.Errorf("%s: %s = %v (exported %v), want > 0", op, opcontract.RecordsOut, v, ok)
		}
	}
}

// container is the part of the docker API's container inspection the test reads.
type container struct {
	ID     string
	Args   []string
	Config struct {
		Image string
		Env   []string
	}
	HostConfig struct {
		Runtime string
	}
}

// dockerContainers inspects every running container of d.
func dockerContainers(t *testing.T, d *harness.Docker) []container {
	t.Helper()
	hc := d.HTTPClient()
	var list []struct{ ID string }
	getJSON(t, hc, "http://docker/containers/json", &list)
	out := make([]container, 0, len(list))
	for _, c := range list {
		var ci container
		getJSON(t, hc, "http://docker/containers/"+c.ID+"/json", &ci)
		out = append(out, ci)
	}
	return out
}

func getJSON(t *testing.T, hc *http.Client, url string, v any) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("docker API %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("docker API %s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("docker API %s: %v", url, err)
	}
}

func argAfter(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
