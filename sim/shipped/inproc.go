package shipped

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// inProcess is an http.RoundTripper that serves each request with the planner's API
// handler in the calling goroutine: the feed's client and the planner's handlers run as
// they do over loopback (routing, authentication, body limits, JSON both ways), without a
// socket, a connection goroutine and their system calls per request. The simulation
// makes tens of thousands of requests per run.
type inProcess struct {
	h http.Handler
}

// RoundTrip implements http.RoundTripper.
func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil {
		req.Body = http.NoBody
	}
	sr := req.Clone(req.Context())
	sr.RequestURI = req.URL.RequestURI()
	sr.RemoteAddr = "127.0.0.1:0"
	w := &recorder{header: http.Header{}}
	t.h.ServeHTTP(w, sr)
	if err := req.Body.Close(); err != nil {
		return nil, fmt.Errorf("shipped: close request body: %w", err)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// recorder is the http.ResponseWriter of an in-process request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}
