package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestDebugAddrOnlyLoopback(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "10.0.0.1:0", "example.com:6060", "127.0.0.1"} {
		if ln, err := debugListen(addr); err == nil {
			ln.Close()
			t.Errorf("debugListen(%q) accepted a non-loopback or malformed address", addr)
		}
	}
	for _, host := range []string{"127.0.0.1", "127.1.2.3", "::1", "localhost", "LOCALHOST"} {
		if !isLoopbackHost(host) {
			t.Errorf("isLoopbackHost(%q) = false", host)
		}
	}
}

func TestDebugEndpointServesPprofOnly(t *testing.T) {
	ln, err := debugListen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveDebug(ctx, ln, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d, want 200 with the profile index", code)
	}
	if code, _ := get("/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap = %d, want 200", code)
	}
	if code, _ := get("/v1/status"); code != http.StatusNotFound {
		t.Errorf("GET /v1/status on the debug listener = %d, want 404", code)
	}
}
