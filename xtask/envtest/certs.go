package main

// Key material for one control plane: a CA, a serving certificate for 127.0.0.1/localhost,
// a service-account signing key and a random admin token. All of it lives in the state
// directory (mode 0700) and is regenerated only when missing.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

type material struct {
	caCert, servingCert, servingKey, saKey, saPub, tokenFile string
	token                                                    string
	caPEM                                                    []byte
}

func ensureMaterial(dir string) (*material, error) {
	m := &material{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "serving.crt"),
		servingKey:  filepath.Join(dir, "serving.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
	}
	if _, err := os.Stat(m.tokenFile); err != nil {
		if err := generate(m); err != nil {
			return nil, err
		}
	}
	ca, err := os.ReadFile(m.caCert)
	if err != nil {
		return nil, err
	}
	m.caPEM = ca
	tok, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return nil, err
	}
	m.token = string(tok)
	return m, nil
}

func generate(m *material) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "flux-handoff-envtest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caParsed, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(5, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caParsed, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tokBytes := make([]byte, 24)
	if _, err := rand.Read(tokBytes); err != nil {
		return err
	}
	token := hex.EncodeToString(tokBytes)

	if err := writePEM(m.caCert, "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writePEM(m.servingCert, "CERTIFICATE", srvDER, 0o644); err != nil {
		return err
	}
	if err := writeKey(m.servingKey, srvKey); err != nil {
		return err
	}
	if err := writeKey(m.saKey, saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(m.saPub, "PUBLIC KEY", pub, 0o644); err != nil {
		return err
	}
	dir := filepath.Dir(m.tokenFile)
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte(token), 0o600); err != nil {
		return err
	}
	// Written last: its presence marks the material as complete.
	csv := fmt.Sprintf("%s,envtest-admin,envtest-admin-uid,\"system:masters\"\n", token)
	return os.WriteFile(m.tokenFile, []byte(csv), 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
