package planner

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/raft"
)

// TLSStreamLayer is a raft stream layer over mutually authenticated TLS: the listener
// requires a client certificate signed by the CA, and dialled peers must present a
// certificate signed by the same CA and valid for the address dialled (an IP SAN for
// host:port addresses). Raft carries the whole replicated state, so a peer that can
// connect can rewrite every decision; with this layer only holders of a CA-signed
// certificate can. Use a CA dedicated to the planner cluster: every certificate it signs
// is a peer. Certificates need both the serverAuth and clientAuth extended key usages.
type TLSStreamLayer struct {
	ln   net.Listener
	adv  net.Addr
	dial *tls.Config
}

// NewTLSStreamLayer listens on bind (host:port) and advertises advertise (bind if empty)
// with the certificate and key files, verifying peers against the CA file.
func NewTLSStreamLayer(bind, advertise, certFile, keyFile, caFile string) (*TLSStreamLayer, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, errors.New("planner: raft TLS needs a certificate, its key and a CA")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("planner: raft TLS key pair: %w", err)
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("planner: raft TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("planner: raft TLS CA %s holds no certificate", caFile)
	}
	if advertise == "" {
		advertise = bind
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("planner: raft advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("planner: raft advertise address %q is not a routable IP", advertise)
	}
	base := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	srv := base.Clone()
	srv.ClientCAs, srv.ClientAuth = pool, tls.RequireAndVerifyClientCert
	ln, err := tls.Listen("tcp", bind, srv)
	if err != nil {
		return nil, fmt.Errorf("planner: raft TLS listen on %s: %w", bind, err)
	}
	cli := base.Clone()
	cli.RootCAs = pool
	return &TLSStreamLayer{ln: ln, adv: adv, dial: cli}, nil
}

// Dial implements raft.StreamLayer: a TLS connection to address, handshake included, so
// that a server certificate the CA did not sign fails here (under TLS 1.3 the server's
// refusal of our certificate shows on the first read instead).
func (l *TLSStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, fmt.Errorf("planner: raft peer address %q: %w", address, err)
	}
	cfg := l.dial.Clone()
	cfg.ServerName = host
	d := &net.Dialer{Timeout: timeout}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), cfg)
	if err != nil {
		return nil, fmt.Errorf("planner: raft TLS dial %s: %w", address, err)
	}
	return conn, nil
}

// Accept implements net.Listener.
func (l *TLSStreamLayer) Accept() (net.Conn, error) { return l.ln.Accept() }

// Close implements net.Listener.
func (l *TLSStreamLayer) Close() error { return l.ln.Close() }

// Addr implements net.Listener: the advertised address.
func (l *TLSStreamLayer) Addr() net.Addr { return l.adv }
