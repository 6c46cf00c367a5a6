package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1: a cert and a
// key file (teapot) and both in one PEM (HAProxy).
func writeCert(dir string) (cert, key, both string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bench.example"},
		DNSNames:     []string{"bench.example", "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", "", err
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", "", err
	}
	cp := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kp := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}))
	if cert, err = writeFile(dir, "cert.pem", cp); err != nil {
		return
	}
	if key, err = writeFile(dir, "key.pem", kp); err != nil {
		return
	}
	both, err = writeFile(dir, "both.pem", cp+kp)
	return
}
