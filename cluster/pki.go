package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Raft runs over mutual TLS with certificates from a cluster CA, the way
// etcd and Consul protect their peer ports. The bootstrapping node creates
// the CA; a joining node sends a certificate request with its join (which
// needs the token) and receives its certificate, the CA certificate and
// the CA key, so that whichever member leads can admit the next node. A
// peer must present a certificate of this CA whose common name is a node
// of the map that is not removed (see tlsStream).
//
// Files, in <data-dir>/tls (directory 0700, files 0600):
const (
	tlsDir       = "tls"
	caCertFile   = "ca.crt"
	caKeyFile    = "ca.key"
	nodeCertFile = "node.crt"
	nodeKeyFile  = "node.key"
)

// raftServerName is the DNS name in every node certificate and the name a
// dialing node verifies: raft reaches peers by address, and which node an
// address belongs to is checked against the map instead.
const raftServerName = "octofs-raft"

// certValidity is how long the CA and node certificates are valid. There is
// no rotation yet, so it is long; see docs/cluster.md.
const certValidity = 10 * 365 * 24 * time.Hour

// raftPKI is a node's raft credentials: the cluster CA (certificate and
// key) and the node's own certificate and key.
type raftPKI struct {
	caCertPEM, caKeyPEM []byte
	caCert              *x509.Certificate
	caKey               crypto.Signer
	pool                *x509.CertPool
	nodeCertPEM         []byte
	node                tls.Certificate
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func decodeKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: no PEM private key", ErrMalformed)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: private key: %v", ErrMalformed, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: private key of type %T", ErrMalformed, k)
	}
	return s, nil
}

func decodeCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM certificate", ErrMalformed)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %v", ErrMalformed, err)
	}
	return c, nil
}

// newClusterCA creates a cluster CA: an ECDSA P-256 key and a self-signed
// certificate allowed to sign node certificates only.
func newClusterCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "octofs cluster CA " + randomHex(4), Organization: []string{"octofs"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// newNodeKey creates a node's key and a certificate request naming id.
func newNodeKey(id NodeID) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: string(id), Organization: []string{"octofs"}},
	}, key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// signCSR issues the certificate of node id for a certificate request. The
// request must be signed by its key and name id: a node gets a certificate
// only for itself.
func (p *raftPKI) signCSR(csrPEM []byte, id NodeID, now time.Time) ([]byte, error) {
	if p == nil || p.caKey == nil {
		return nil, fmt.Errorf("cluster: this node holds no cluster CA key; it cannot admit nodes")
	}
	blk, _ := pem.Decode(csrPEM)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: join needs a PEM certificate request", ErrBadRequest)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate request: %v", ErrBadRequest, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: certificate request signature: %v", ErrBadRequest, err)
	}
	if csr.Subject.CommonName != string(id) {
		return nil, fmt.Errorf("%w: certificate request names %q, not the joining node %q", ErrBadRequest, csr.Subject.CommonName, id)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: string(id), Organization: []string{"octofs"}},
		DNSNames:     []string{raftServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, csr.PublicKey, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("cluster: issue certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newRaftPKI assembles credentials from PEM and checks that they fit: the
// node certificate is signed by the CA, names id and matches its key.
func newRaftPKI(id NodeID, caCertPEM, caKeyPEM, nodeCertPEM, nodeKeyPEM []byte) (*raftPKI, error) {
	p := &raftPKI{caCertPEM: caCertPEM, caKeyPEM: caKeyPEM, nodeCertPEM: nodeCertPEM, pool: x509.NewCertPool()}
	var err error
	if p.caCert, err = decodeCert(caCertPEM); err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !p.caCert.IsCA {
		return nil, fmt.Errorf("%w: the CA certificate is not a CA", ErrMalformed)
	}
	p.pool.AddCert(p.caCert)
	if len(caKeyPEM) > 0 {
		if p.caKey, err = decodeKey(caKeyPEM); err != nil {
			return nil, fmt.Errorf("CA key: %w", err)
		}
	}
	if p.node, err = tls.X509KeyPair(nodeCertPEM, nodeKeyPEM); err != nil {
		return nil, fmt.Errorf("%w: node certificate and key: %v", ErrMalformed, err)
	}
	leaf := p.node.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(p.node.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if leaf.Subject.CommonName != string(id) {
		return nil, fmt.Errorf("%w: node certificate names %q, not %q", ErrMalformed, leaf.Subject.CommonName, id)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("%w: node certificate not issued by the cluster CA: %v", ErrMalformed, err)
	}
	return p, nil
}

// bootstrapPKI creates the cluster CA and this node's certificate, and
// returns them with the node's key (PEM) for storePKI.
func bootstrapPKI(id NodeID, now time.Time) (*raftPKI, []byte, error) {
	caCertPEM, caKeyPEM, err := newClusterCA(now)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, csrPEM, err := newNodeKey(id)
	if err != nil {
		return nil, nil, err
	}
	ca := &raftPKI{}
	if ca.caCert, err = decodeCert(caCertPEM); err != nil {
		return nil, nil, err
	}
	if ca.caKey, err = decodeKey(caKeyPEM); err != nil {
		return nil, nil, err
	}
	certPEM, err := ca.signCSR(csrPEM, id, now)
	if err != nil {
		return nil, nil, err
	}
	p, err := newRaftPKI(id, caCertPEM, caKeyPEM, certPEM, keyPEM)
	return p, keyPEM, err
}

// storePKI writes the credentials to dir/tls with mode 0600.
func storePKI(dir string, p *raftPKI, nodeKeyPEM []byte) error {
	d := filepath.Join(dir, tlsDir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{caCertFile: p.caCertPEM, caKeyFile: p.caKeyPEM, nodeCertFile: p.nodeCertPEM, nodeKeyFile: nodeKeyPEM} {
		if len(b) == 0 {
			continue
		}
		if err := writeFileSync(filepath.Join(d, name), b); err != nil {
			return fmt.Errorf("cluster: store %s: %w", name, err)
		}
	}
	return nil
}

// loadPKI reads the credentials of node id from dir/tls; ok is false if
// there are none.
func loadPKI(dir string, id NodeID) (p *raftPKI, ok bool, err error) {
	d := filepath.Join(dir, tlsDir)
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(d, name)) }
	nodeCert, err := read(nodeCertFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var files [3][]byte
	for i, name := range []string{nodeKeyFile, caCertFile, caKeyFile} {
		if files[i], err = read(name); err != nil {
			return nil, false, fmt.Errorf("cluster: raft credentials in %s: %w", d, err)
		}
	}
	p, err = newRaftPKI(id, files[1], files[2], nodeCert, files[0])
	if err != nil {
		return nil, false, fmt.Errorf("cluster: raft credentials in %s: %w", d, err)
	}
	return p, true, nil
}

// peerID returns the node a verified peer certificate names.
func peerID(cs tls.ConnectionState) (NodeID, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("%w: peer presented no certificate", ErrUnauthorized)
	}
	return NodeID(cs.PeerCertificates[0].Subject.CommonName), nil
}
