// Mutual TLS on one machine, rooted in the token: every process derives
// the same certificate authority from it and shows a certificate of its
// own that the authority signed, so that each side of a connection proves
// it holds the token without sending it.

package system

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// localName is the name every local certificate carries; peers are told
// apart by their keys, not their names.
const localName = "lanes.local"

// LocalTLS is the TLS configuration of a process that holds the token: a
// fresh key of its own, certified by the authority the token derives, and
// peers checked to hold a certificate of the same authority, both ways.
func LocalTLS(t Token) (*tls.Config, error) {
	seed, err := hkdf.Key(sha256.New, t, nil, "lanes local certificate authority v1", ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("%w: derive the token's authority: %v", wire.ErrConfig, err)
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	// The authority's certificate is the same in every process (its fields
	// are fixed): only its key matters, to check a peer's.
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lanes local authority"},
		NotBefore: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("%w: the token's authority: %v", wire.ErrConfig, err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("%w: the token's authority: %v", wire.ErrConfig, err)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: this process's key: %v", wire.ErrConfig, err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	now := time.Now()
	leafTmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: localName}, DNSNames: []string{localName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(100, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("%w: this process's certificate: %v", wire.ErrConfig, err)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errNoLocalCert
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w: %v", errNoLocalCert, err)
		}
		if err := leaf.CheckSignatureFrom(ca); err != nil {
			return errNoLocalCert
		}
		return nil
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS13,
		ServerName:   localName,
		// A client checks the server's certificate here, before it shows
		// its own: a listener without the token learns nothing.
		InsecureSkipVerify:    true, // the chain is checked by VerifyPeerCertificate, against the token's authority alone
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify,
	}, nil
}

// errNoLocalCert is a peer whose certificate the token's authority did not
// sign: it does not hold the token.
var errNoLocalCert = errors.New("remote: the peer's certificate is not of this token's authority: it does not hold the token")

// keyOf names a peer by its certificate's key (its identity: a fresh one
// each process).
func keyOf(certs []*x509.Certificate) string {
	if len(certs) == 0 {
		return ""
	}
	sum := sha256.Sum256(certs[0].RawSubjectPublicKeyInfo)
	return string(sum[:])
}
