package soakbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// OversizeBody is the size of each oversize request's body: above the planner's 4 MiB
// limit of PUT /v1/pipelines/<job> (planner.MaxPipelineBody).
const OversizeBody = 5 << 20

// chunkSize is the chunk length of the chunked oversize requests.
const chunkSize = 64 << 10

// OversizeRequest is the outcome of one request above the body limit.
type OversizeRequest struct {
	// Target is "leader" or "follower".
	Target string
	// Server is the ID of the server it was sent to.
	Server string
	// Chunked is true for a chunked body (no Content-Length).
	Chunked bool
	// Code is the HTTP status of the answer (0: none).
	Code int
	// Latency is the time from the first byte sent to the answer's status line.
	Latency time.Duration
	// Err says why there was no answer, or what an answer other than a refusal said.
	Err string
}

// Refused reports whether the planner refused the request without taking its body: 413,
// or 411 (Length Required) for a chunked body on a route whose limit is MiBs.
func (q OversizeRequest) Refused() bool {
	return q.Code == 413 || q.Chunked && q.Code == 411
}

// oversizePayload is a 5 MiB JSON-looking body: {"job":"aaaa…"}.
func oversizePayload() []byte {
	b := make([]byte, OversizeBody)
	copy(b, `{"job":"`)
	for i := len(`{"job":"`); i < len(b)-2; i++ {
		b[i] = 'a'
	}
	copy(b[len(b)-2:], `"}`)
	return b
}

// sendOversize sends PUT /v1/pipelines/<job> with body to the server at base over a raw
// connection, with a Content-Length header or chunked, and measures the time to the
// answer's status line. The body is written concurrently with reading the answer, so an
// answer sent before the body was read (what the planner does for a Content-Length above
// the limit) is measured as such.
// It returns the status, the latency and the answer's body (trimmed, bounded).
func sendOversize(ctx context.Context, base, job string, body []byte, chunked bool) (int, time.Duration, string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return 0, 0, "", fmt.Errorf("oversize request: address %q: %w", base, err)
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, 0, "", fmt.Errorf("oversize request: dial %s: %w", u.Host, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)

	var hdr strings.Builder
	fmt.Fprintf(&hdr, "PUT /v1/pipelines/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nConnection: close\r\n", url.PathEscape(job), u.Host)
	if chunked {
		hdr.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	} else {
		fmt.Fprintf(&hdr, "Content-Length: %d\r\n\r\n", len(body))
	}
	start := time.Now()
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		w := bufio.NewWriterSize(conn, chunkSize+16)
		if _, err := io.WriteString(w, hdr.String()); err != nil {
			return
		}
		if !chunked {
			_, _ = w.Write(body)
			_ = w.Flush()
			return
		}
		for off := 0; off < len(body); off += chunkSize {
			c := body[off:min(off+chunkSize, len(body))]
			if _, err := fmt.Fprintf(w, "%x\r\n", len(c)); err != nil {
				return
			}
			if _, err := w.Write(c); err != nil {
				return
			}
			if _, err := io.WriteString(w, "\r\n"); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "0\r\n\r\n")
		_ = w.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	lat := time.Since(start)
	if err != nil {
		conn.Close()
		<-wrote
		return 0, lat, "", fmt.Errorf("oversize request to %s: read the answer: %w", base, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	// Stop the writer: the server has answered and closes the connection anyway.
	conn.Close()
	<-wrote
	return resp.StatusCode, lat, nonEmpty(msg), nil
}

// nonEmpty trims and bounds a diagnostic.
func nonEmpty(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
