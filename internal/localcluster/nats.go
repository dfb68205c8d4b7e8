package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// NATSJobID is the ID of the job jobs/nats.nomad.hcl registers.
const NATSJobID = "trident-nats"

// NATSStartTimeout bounds how long RunNATS waits for the NATS job to serve.
const NATSStartTimeout = 2 * time.Minute

// RunNATS registers jobs/nats.nomad.hcl on the cluster with a port Nomad picks from the
// client's dynamic range (nats_port = 0), waits (at most NATSStartTimeout) until the server
// in the allocation answers the NATS protocol and returns its client URL. The JetStream
// store lives in the allocation.
//
// A port chosen beforehand (FreePort) is only free until something binds it: another test
// on the machine can take it before the task starts, and a NATS client then waits forever
// on a peer that never sends INFO. The agents' dynamic ranges are disjoint from the ports
// FreePort draws, and the probe checks it is NATS that answers.
func RunNATS(ctx context.Context, cl *api.Client, tridentBin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, NATSStartTimeout)
	defer cancel()
	vars := map[string]string{"trident_bin": tridentBin, "nats_port": "0"}
	job, err := ParseJobFile(ctx, cl, "nats.nomad.hcl", vars)
	if err != nil {
		return "", err
	}
	if _, _, err := cl.Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return "", fmt.Errorf("register %s: %w", NATSJobID, err)
	}
	var last string
	for {
		addr, why := natsAddr(ctx, cl)
		if addr != "" {
			err := probeNATS(ctx, addr)
			if err == nil {
				return "nats://" + addr, nil
			}
			why = err.Error()
		}
		last = why
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for job %s to serve NATS: %w (last: %s)", NATSJobID, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// natsAddr returns 127.0.0.1:port of the running NATS allocation's "nats" port, or "" and why
// there is none yet.
func natsAddr(ctx context.Context, cl *api.Client) (string, string) {
	stubs, _, err := cl.Jobs().Allocations(NATSJobID, false, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Sprintf("list allocations: %v", err)
	}
	for _, s := range stubs {
		if s.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		a, _, err := cl.Allocations().Info(s.ID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return "", fmt.Sprintf("allocation %s: %v", s.ID, err)
		}
		if a.AllocatedResources == nil {
			continue
		}
		for _, p := range a.AllocatedResources.Shared.Ports {
			if p.Label == "nats" && p.Value > 0 {
				// The server binds 127.0.0.1 whatever the node's address.
				return net.JoinHostPort("127.0.0.1", fmt.Sprint(p.Value)), ""
			}
		}
	}
	return "", fmt.Sprintf("no running allocation of %s with a nats port (%d allocations)", NATSJobID, len(stubs))
}

// probeNATS connects to addr and reads the server's greeting: a NATS server sends an INFO
// line as soon as it accepts a connection.
func probeNATS(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the greeting of %s: %w", addr, err)
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("%s answered %.40q, not a NATS INFO line", addr, line)
	}
	return nil
}
