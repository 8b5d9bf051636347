package zktest

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TLSFiles configure a server's secure client port: PEM files, as
// internal/testca writes them.
type TLSFiles struct {
	CertFile, KeyFile string // the server's certificate and key
	CAFile            string // CAs the server trusts for client certificates
	ClientAuth        bool   // require a client certificate signed by CAFile
}

// StartTLS starts a standalone server that also serves TLS on
// SecureAddr (ZooKeeper's secureClientPort, on the Netty connection
// factory), and stops it when the test ends.
func StartTLS(tb testing.TB, f TLSFiles) *Server {
	tb.Helper()
	s, err := newStandalone("", &f)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// SecureAddr is the host:port of the TLS client port; empty without TLS.
func (s *Server) SecureAddr() string {
	if s.tls == nil {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.securePort))
}

// keystorePath is the PEM key store ZooKeeper reads: the key (PKCS #8)
// and the certificate in one file.
func (s *Server) keystorePath() string { return filepath.Join(s.dir.Path, "keystore.pem") }

// setTLS writes the key store and keeps f for the configuration.
func (s *Server) setTLS(f TLSFiles) error {
	key, err := pkcs8(f.KeyFile)
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(f.CertFile)
	if err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	if err := os.WriteFile(s.keystorePath(), append(key, cert...), 0o600); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	s.tls = &f
	return nil
}

// pkcs8 returns the PEM private key of file in PKCS #8 form ("PRIVATE
// KEY"), the only one ZooKeeper's PEM key store reads.
func pkcs8(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("zktest: key_file holds no PEM block")
	}
	if blk.Type == "PRIVATE KEY" {
		return b, nil
	}
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("zktest: key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("zktest: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// tlsConfig is zoo.cfg's TLS part, empty without TLS.
func (s *Server) tlsConfig() string {
	if s.tls == nil {
		return ""
	}
	auth := "none"
	if s.tls.ClientAuth {
		auth = "need"
	}
	return fmt.Sprintf(`secureClientPort=%d
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=%s
ssl.keyStore.type=PEM
ssl.trustStore.location=%s
ssl.trustStore.type=PEM
ssl.clientAuth=%s
`, s.securePort, s.keystorePath(), s.tls.CAFile, auth)
}
