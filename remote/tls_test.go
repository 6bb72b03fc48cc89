package remote_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/remote"
)

// writeCerts writes a CA and two certificates it signed (host and front,
// both for 127.0.0.1) into dir.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lanes test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("CA: got err %v, want nil", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatalf("write %s: got err %v, want nil", name, err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	for i, who := range []string{"host", "front"} {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		c := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: who}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, c, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("%s certificate: got err %v, want nil", who, err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		write(who+".pem", "CERTIFICATE", der)
		write(who+"-key.pem", "EC PRIVATE KEY", kder)
	}
}

// tlsFrontChild, in a child test process (its endpoint's TLS is its own),
// starts a front with mutual TLS against the host at LANES_TLS_HOST and
// serves one tenant's step.
func tlsFrontChild() int {
	dir := os.Getenv("LANES_TLS_DIR")
	cfg, err := remote.LoadTLS(filepath.Join(dir, "front.pem"), filepath.Join(dir, "front-key.pem"), filepath.Join(dir, "ca.pem"))
	if err != nil {
		fmt.Println("LoadTLS:", err)
		return 1
	}
	fc := remote.FrontConfig{TLS: cfg, JoinTimeout: 10 * time.Second}
	if name := os.Getenv("LANES_TLS_CLUSTER"); name != "" {
		fc.Cluster = &remote.ClusterConfig{Name: name, Seeds: strings.Split(os.Getenv("LANES_TLS_SEEDS"), ","), Refresh: 100 * time.Millisecond}
	} else {
		fc.Hosts = []string{os.Getenv("LANES_TLS_HOST")}
	}
	f, err := remote.StartFront(context.Background(), fc)
	if err != nil {
		fmt.Println("StartFront:", err)
		return 1
	}
	defer f.Stop(context.Background())
	b, err := f.Alloc(context.Background(), "tenant", cudaSpec64())
	if err != nil {
		fmt.Println("Alloc:", err)
		return 1
	}
	fmt.Printf("served over mutual TLS: buffer %d\n", b.ID)
	return 0
}

// TestMutualTLS: a host listening with mutual TLS serves a front that
// presents a certificate of the same CA; a front without TLS gets no
// registration from it.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	writeCerts(t, dir)
	_, addr := startHostProcess(t, "--tls-cert", filepath.Join(dir, "host.pem"), "--tls-key", filepath.Join(dir, "host-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem"))
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_TLS_CHILD=1", "LANES_TLS_DIR="+dir, "LANES_TLS_HOST="+addr)
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "served over mutual TLS") {
		t.Fatalf("a front with mutual TLS: got err %v, output %q; want it served", err, out)
	}
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, JoinTimeout: 2 * time.Second, Logf: t.Logf})
	if err == nil {
		_ = f.Stop(context.Background())
		t.Fatalf("a front without TLS: got registered, want no registration from a TLS host")
	}
}

// TestMutualTLSInACluster: a host with mutual TLS that is a member of a
// cluster is found there and served by a front with TLS (the README's
// across-machines setup, on loopback).
func TestMutualTLSInACluster(t *testing.T) {
	dir := t.TempDir()
	writeCerts(t, dir)
	m := holdSocket(t)
	startHostWith(t, []*os.File{m.file}, "--tls-cert", filepath.Join(dir, "host.pem"), "--tls-key", filepath.Join(dir, "host-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--cluster", "tls", "--membership-fd", "3", "--seeds", m.addr)
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_TLS_CHILD=1", "LANES_TLS_DIR="+dir, "LANES_TLS_CLUSTER=tls", "LANES_TLS_SEEDS="+m.addr)
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "served over mutual TLS") {
		t.Fatalf("a front with mutual TLS following the cluster: got err %v, output %q; want it served", err, out)
	}
}

// TestNonLoopbackNeedsTLS: lanehost refuses to listen off loopback
// without TLS, with exit status 2 and what to do.
func TestNonLoopbackNeedsTLS(t *testing.T) {
	out, err := exec.Command(lanehostBin, "--listen", "0.0.0.0:0").CombinedOutput()
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "TLS") {
		t.Fatalf("lanehost --listen 0.0.0.0:0: got err %v, output %q; want exit status 2 naming TLS", err, out)
	}
}
