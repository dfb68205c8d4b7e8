package plugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/trident-sched/trident/apm/profile"
)

// InstanceMetrics is one scrape of one operator instance, reduced by its group's metrics
// profile (apm/profile) to the observation layer's inputs.
type InstanceMetrics = profile.Metrics

// ScrapeInstance fetches and parses url (a Prometheus text endpoint) as the operator
// metrics contract (the trident profile).
func ScrapeInstance(ctx context.Context, hc *http.Client, url, allocID string) (InstanceMetrics, error) {
	p, _ := profile.Lookup(profile.Trident)
	return ScrapeInstanceProfile(ctx, hc, url, allocID, p, profile.Options{})
}

// ScrapeInstanceProfile fetches url and maps it with metrics profile p.
func ScrapeInstanceProfile(ctx context.Context, hc *http.Client, url, allocID string, p profile.Profile, o profile.Options) (InstanceMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return InstanceMetrics{}, fmt.Errorf("scrape %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	m, err := profile.Parse(resp.Body, p, o)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	m.AllocID, m.Time = allocID, time.Now()
	return m, nil
}

// ParseMetrics reads Prometheus text format as the operator metrics contract (the trident
// profile): series of one name are summed (an instance exposes one series per name except
// features); a non-finite value, or a missing required metric, is an error naming it.
func ParseMetrics(r io.Reader) (InstanceMetrics, error) {
	p, _ := profile.Lookup(profile.Trident)
	return profile.Parse(r, p, profile.Options{})
}
