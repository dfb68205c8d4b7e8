package discovery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
)

// fakePlanners is a job whose allocations register as planner servers the way
// jobs/planner.nomad.hcl does (dynamic ports: all run on the one loopback client).
const fakePlanners = `
job "fake-planners" {
  type = "service"
  group "planner" {
    count = 3
    network {
      port "http" {}
      port "raft" {}
    }
    service {
      name     = "trident-planner"
      provider = "nomad"
      port     = "http"
      tags     = ["raft_id=planner-${NOMAD_ALLOC_INDEX}", "raft_addr=${NOMAD_ADDR_raft}", "http_addr=http://${NOMAD_ADDR_http}"]
    }
    task "sleep" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`

// TestNomadServiceDiscovery: against a real Nomad, the planner job file parses and
// validates, and three allocations registered like its servers are discovered as three
// peers with their raft IDs and addresses.
func TestNomadServiceDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("real Nomad: skipped in -short")
	}
	n := harness.StartNomad(t, harness.NomadOptions{})
	cl := n.API()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pj, err := harness.ParseJobFile(ctx, cl, "planner.nomad.hcl", map[string]string{"trident_binary": "/usr/local/bin/trident"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Validate(pj, nil); err != nil {
		t.Fatalf("jobs/planner.nomad.hcl does not validate: %v", err)
	}
	cfgArgs, _ := pj.TaskGroups[0].Tasks[0].Config["args"].([]any)
	joined := ""
	for _, a := range cfgArgs {
		joined += " " + fmt.Sprint(a)
	}
	if !strings.Contains(joined, "-nomad-service trident-planner") || !strings.Contains(joined, "-bootstrap-expect 3") {
		t.Fatalf("planner job args %q lack the nomad-service discovery flags", joined)
	}
	if s := pj.TaskGroups[0].Services[0]; s.Name != "trident-planner" || s.Provider != "nomad" || len(s.Tags) != 3 {
		t.Fatalf("planner job service %+v", s)
	}

	job, err := cl.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: fakePlanners, Canonicalize: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	d := Nomad{Client: cl, Service: "trident-planner"}
	peers, err := d.WaitPeers(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range peers {
		if want := fmt.Sprintf("planner-%d", i); p.ID != want {
			t.Errorf("peer %d: ID %q, want %q", i, p.ID, want)
		}
		if !strings.HasPrefix(p.RaftAddr, "127.0.0.1:") || !strings.HasPrefix(p.HTTPAddr, "http://127.0.0.1:") || p.RaftAddr == p.HTTPAddr[len("http://"):] {
			t.Errorf("peer %d: addresses %+v", i, p)
		}
	}
	if len(peers) != 3 {
		t.Fatalf("discovered %d peers, want 3: %+v", len(peers), peers)
	}
}
