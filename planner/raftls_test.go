package planner

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/fsm"
)

// pkiFiles are PEM files of a test CA and one leaf certificate it signed.
type pkiFiles struct{ ca, cert, key string }

func (p *pkiFiles) certOr() string {
	if p == nil {
		return ""
	}
	return p.cert
}

func (p *pkiFiles) keyOr() string {
	if p == nil {
		return ""
	}
	return p.key
}

func (p *pkiFiles) caOr() string {
	if p == nil {
		return ""
	}
	return p.ca
}

// testPKI writes a CA and a loopback leaf certificate (server and client use) it signed.
func testPKI(t *testing.T, name string) *pkiFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// issue signs tpl with parent (self-signed when parent is nil) and returns the
	// certificate and its key.
	issue := func(tpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, *x509.Certificate, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tpl.NotBefore, tpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return der, c, key
	}
	caDER, caCert, caKey := issue(&x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}, nil, nil)
	der, _, key := issue(&x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " planner"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, caCert, caKey)
	kb, _ := x509.MarshalECPrivateKey(key)
	return &pkiFiles{ca: write("ca.pem", "CERTIFICATE", caDER), cert: write("cert.pem", "CERTIFICATE", der), key: write("key.pem", "EC PRIVATE KEY", kb)}
}

// TestRaftOverMutualTLS: three servers with RaftTLS elect a leader and replicate a write;
// a peer holding a certificate of another CA can neither connect to them nor be dialled
// by them.
func TestRaftOverMutualTLS(t *testing.T) {
	pki := testPKI(t, "trident")
	c := &testCluster{t: t, token: "s3cret", tls: pki}
	for i := 0; i < 3; i++ {
		c.peers = append(c.peers, Peer{ID: fmt.Sprintf("p%d", i), RaftAddr: harness.FreeAddr(t), HTTPAddr: "http://" + harness.FreeAddr(t)})
		c.dirs = append(c.dirs, t.TempDir())
	}
	c.servers, c.cancels, c.done = make([]*Server, 3), make([]context.CancelFunc, 3), make([]chan error, 3)
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
	})
	li, _ := c.leader(15 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &fsm.Pipeline{Job: "pdf", Operators: []fsm.Operator{{Name: "parse", Order: 0, CPU: 1, MemoryMB: 512, Amplification: 1}}}
	if _, err := c.servers[li].Propose(ctx, fsm.Command{Op: fsm.OpRegisterPipeline, Pipeline: p}); err != nil {
		t.Fatalf("propose on the leader: %v", err)
	}
	waitEqual(t, c, 10*time.Second)

	// The raft port speaks TLS: a holder of a certificate of the cluster's CA completes
	// a handshake, verifying the server against the CA.
	good, err := NewTLSStreamLayer("127.0.0.1:0", "", pki.cert, pki.key, pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	gc, err := good.Dial(raft.ServerAddress(c.peers[li].RaftAddr), 5*time.Second)
	if err != nil {
		t.Fatalf("TLS handshake with the raft port: %v", err)
	}
	if st := gc.(*tls.Conn).ConnectionState(); !st.HandshakeComplete || len(st.PeerCertificates) == 0 {
		t.Fatalf("raft port handshake incomplete: %+v", st)
	}
	gc.Close()

	// A stranger with a certificate of another CA.
	rogue := testPKI(t, "rogue")
	cert, err := tls.LoadX509KeyPair(rogue.cert, rogue.key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", c.peers[li].RaftAddr, &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true})
	if err == nil {
		// TLS 1.3: the server checks the client certificate after the client's handshake
		// completes, so the refusal shows on the first read.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("raft listener accepted a client certificate of another CA")
	}
	rl, err := NewTLSStreamLayer("127.0.0.1:0", "", rogue.cert, rogue.key, rogue.ca)
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	if conn, err := rl.Dial(raft.ServerAddress(c.peers[li].RaftAddr), 5*time.Second); err == nil {
		conn.Close()
		t.Fatal("dialled a raft peer whose certificate the rogue CA did not sign")
	}
	// Plain TCP raft traffic is not accepted either.
	raw, err := net.DialTimeout("tcp", c.peers[li].RaftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = raw.Write([]byte{0, 1, 2, 3}) // not a TLS record
	_, err = raw.Read(make([]byte, 1))
	raw.Close()
	if err == nil {
		t.Fatal("raft listener answered plain TCP")
	}
}

func TestTLSStreamLayerNeedsFiles(t *testing.T) {
	if _, err := NewTLSStreamLayer("127.0.0.1:0", "", "", "", ""); err == nil {
		t.Fatal("raft TLS without files accepted")
	}
	pki := testPKI(t, "x")
	if _, err := NewTLSStreamLayer("0.0.0.0:0", "", pki.cert, pki.key, pki.ca); err == nil {
		t.Fatal("unspecified advertise address accepted")
	}
}
