package shipped

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestInProcessRoundTrip: a request through inProcess reaches the handler with its
// method, path, query and body, and the response carries the handler's status, headers
// and body (an error status included, which the planner client turns into its API error).
func TestInProcessRoundTrip(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/x/{id}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, r.PathValue("id")+"|"+r.URL.Query().Get("q")+"|"+string(b))
	})
	c := &http.Client{Transport: inProcess{mux}}
	req, err := http.NewRequest(http.MethodPut, "http://planner.sim/v1/x/7?q=a", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Content-Type") != "application/json" || string(b) != "7|a|body" {
		t.Fatalf("got %d %q %q, want 409 application/json \"7|a|body\"", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	resp2, err := c.Get("http://planner.sim/v1/none")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotFound {
		t.Fatalf("unrouted path: status %d, want 404", resp2.StatusCode)
	}
}
