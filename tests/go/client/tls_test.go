// TLS through the official Go client (crypto/tls): mutual TLS with the
// node's tls-name in the host, and the refusals a user meets (another
// name, another CA, no client certificate). tests/python/test_tls.py
// starts a bolided with a TLS port asking for client certificates and
// runs this test with BOLIDE_TLS_PORT and BOLIDE_TLS_DIR (the PKI the
// tls_certs example made); run by hand without them, it fails.
package client

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
)

type tlsSetup struct {
	port int
	dir  string
}

func tlsEnv(t *testing.T) tlsSetup {
	t.Helper()
	port, err := strconv.Atoi(os.Getenv("BOLIDE_TLS_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_TLS_PORT not set (tests/python/test_tls.py runs this test): %v", err)
	}
	dir := os.Getenv("BOLIDE_TLS_DIR")
	if dir == "" {
		t.Fatal("BOLIDE_TLS_DIR not set")
	}
	return tlsSetup{port: port, dir: dir}
}

func (s tlsSetup) config(t *testing.T, ca string, cert string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(s.dir, ca))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	config := &tls.Config{RootCAs: pool}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(s.dir, cert+".pem"), filepath.Join(s.dir, cert+".key"))
		if err != nil {
			t.Fatal(err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

func (s tlsSetup) connect(config *tls.Config, name string) (*as.Client, error) {
	policy := as.NewClientPolicy()
	policy.TlsConfig = config
	policy.Timeout = 3 * time.Second
	host := as.NewHost("127.0.0.1", s.port)
	host.TLSName = name
	return as.NewClientWithPolicyAndHost(policy, host)
}

func TestTLSMutualPutGetBatchAndInfo(t *testing.T) {
	s := tlsEnv(t)
	client, err := s.connect(s.config(t, "ca.pem", "client"), "bolide-node")
	if err != nil {
		t.Fatalf("connect over TLS: %v", err)
	}
	defer client.Close()
	keys := put(t, client, "go_tls_"+unique, 50)
	records, err := client.BatchGet(nil, keys)
	if err != nil {
		t.Fatalf("BatchGet over TLS: %v", err)
	}
	for i, rec := range records {
		if rec == nil || rec.Bins["n"] != i {
			t.Fatalf("record %d over TLS: %v", i, rec)
		}
	}
	node, err := client.Cluster().GetRandomNode()
	if err != nil {
		t.Fatal(err)
	}
	info, err := node.RequestInfo(as.NewInfoPolicy(), "service-tls-std")
	if err != nil {
		t.Fatal(err)
	}
	if want := "127.0.0.1:" + strconv.Itoa(s.port); info["service-tls-std"] != want {
		t.Fatalf("service-tls-std = %q, want %q", info["service-tls-std"], want)
	}
}

func TestTLSRefusals(t *testing.T) {
	s := tlsEnv(t)
	cases := []struct {
		what   string
		config *tls.Config
		name   string
		expect string
	}{
		{"a name the certificate does not carry", s.config(t, "ca.pem", "client"), "not-the-node", "certificate"},
		{"a node certificate from another CA", s.config(t, "other-ca.pem", "client"), "bolide-node", "certificate"},
		{"no client certificate", s.config(t, "ca.pem", ""), "bolide-node", ""},
		{"a client certificate from another CA", s.config(t, "ca.pem", "other-client"), "bolide-node", ""},
	}
	for _, c := range cases {
		client, err := s.connect(c.config, c.name)
		if err == nil {
			// Connected anyway: a request must not get through.
			k := key(t, "go_tls_refused_"+unique, 1)
			perr := client.Put(nil, k, as.BinMap{"n": 1})
			client.Close()
			if perr == nil {
				t.Fatalf("%s: connected and wrote", c.what)
			}
			continue
		}
		if c.expect != "" && !strings.Contains(err.Error(), c.expect) {
			t.Fatalf("%s: error %q does not mention %q", c.what, err, c.expect)
		}
	}
}
