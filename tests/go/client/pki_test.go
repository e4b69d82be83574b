// PKI login through the official Go client: AuthModePKI over mutual TLS,
// no user and no password; the node logs the client in as the user its
// certificate's common name names. tests/python/test_security_pki.py
// starts a secured node whose TLS port asks for client certificates,
// creates the users (client-a: PKI only, read-write; client-b: a password
// too, read only) and runs this test with BOLIDE_PKI_PORT and
// BOLIDE_TLS_DIR; run by hand without them, it fails.
package client

import (
	"os"
	"strconv"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

func pkiSetup(t *testing.T) tlsSetup {
	t.Helper()
	port, err := strconv.Atoi(os.Getenv("BOLIDE_PKI_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_PKI_PORT not set (tests/python/test_security_pki.py runs this test): %v", err)
	}
	dir := os.Getenv("BOLIDE_TLS_DIR")
	if dir == "" {
		t.Fatal("BOLIDE_TLS_DIR not set")
	}
	return tlsSetup{port: port, dir: dir}
}

func pkiConnect(t *testing.T, s tlsSetup, cert string) (*as.Client, as.Error) {
	t.Helper()
	policy := as.NewClientPolicy()
	policy.TlsConfig = s.config(t, "ca.pem", cert)
	policy.AuthMode = as.AuthModePKI
	policy.Timeout = 5 * time.Second
	host := as.NewHost("127.0.0.1", s.port)
	host.TLSName = "bolide-node"
	return as.NewClientWithPolicyAndHost(policy, host)
}

func TestPKILogin(t *testing.T) {
	s := pkiSetup(t)
	// client-a (read-write): writes and reads, over several connections
	// authenticated with the session token of one PKI login.
	client, err := pkiConnect(t, s, "client")
	if err != nil {
		t.Fatalf("PKI login as client-a: %v", err)
	}
	defer client.Close()
	keys := put(t, client, "go_pki_"+unique, 30)
	records, err := client.BatchGet(nil, keys)
	if err != nil {
		t.Fatalf("BatchGet: %v", err)
	}
	for i, rec := range records {
		if rec == nil || rec.Bins["n"] != i {
			t.Fatalf("record %d: %v", i, rec)
		}
	}
	// Logged in as client-a and nobody else: it administers no users.
	err = client.CreateUser(nil, "go-pki-mallory", "x", []string{"read"})
	if err == nil || !err.Matches(types.ROLE_VIOLATION) {
		t.Fatalf("client-a created a user: %v", err)
	}
	users, err := client.QueryUser(nil, "client-a")
	if err != nil {
		t.Fatalf("client-a queries itself: %v", err)
	}
	if users.User != "client-a" || len(users.Roles) != 1 || users.Roles[0] != "read-write" {
		t.Fatalf("client-a: %+v", users)
	}

	// client-b (a password too, read only): reads, may not write.
	reader, err := pkiConnect(t, s, "client-b")
	if err != nil {
		t.Fatalf("PKI login as client-b: %v", err)
	}
	defer reader.Close()
	record, err := reader.Get(nil, keys[3])
	if err != nil || record.Bins["n"] != 3 {
		t.Fatalf("client-b reads: %v %v", record, err)
	}
	err = reader.Put(nil, keys[3], as.BinMap{"n": -1})
	if err == nil || !err.Matches(types.ROLE_VIOLATION) {
		t.Fatalf("client-b wrote: %v", err)
	}
}

func TestPKIRefusals(t *testing.T) {
	s := pkiSetup(t)
	// A certificate from the cluster's CA naming no user.
	client, err := pkiConnect(t, s, "client-c")
	if err == nil {
		client.Close()
		t.Fatal("client-c (no such user) logged in")
	}
	if !err.Matches(types.INVALID_USER) {
		t.Fatalf("client-c: %v, want INVALID_USER", err)
	}
	// A password alongside PKI: the client itself refuses.
	policy := as.NewClientPolicy()
	policy.TlsConfig = s.config(t, "ca.pem", "client")
	policy.AuthMode = as.AuthModePKI
	policy.User = "client-a"
	policy.Password = "nopassword"
	host := as.NewHost("127.0.0.1", s.port)
	host.TLSName = "bolide-node"
	if client, err := as.NewClientWithPolicyAndHost(policy, host); err == nil {
		client.Close()
		t.Fatal("PKI with a password connected")
	}
	// client-a has no password: an internal login with the marker fails.
	policy = as.NewClientPolicy()
	policy.TlsConfig = s.config(t, "ca.pem", "client")
	policy.User = "client-a"
	policy.Password = "nopassword"
	policy.Timeout = 5 * time.Second
	client, err = as.NewClientWithPolicyAndHost(policy, host)
	if err == nil {
		client.Close()
		t.Fatal("client-a logged in with a password")
	}
	if !err.Matches(types.INVALID_PASSWORD) {
		t.Fatalf("client-a with a password: %v, want INVALID_PASSWORD", err)
	}
}
