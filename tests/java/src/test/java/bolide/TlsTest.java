package bolide;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.aerospike.client.AerospikeClient;
import com.aerospike.client.AerospikeException;
import com.aerospike.client.Bin;
import com.aerospike.client.Host;
import com.aerospike.client.Info;
import com.aerospike.client.Key;
import com.aerospike.client.Record;
import com.aerospike.client.ResultCode;
import com.aerospike.client.admin.User;
import com.aerospike.client.cluster.Node;
import com.aerospike.client.policy.AuthMode;
import com.aerospike.client.policy.ClientPolicy;
import com.aerospike.client.policy.TlsPolicy;
import java.io.ByteArrayInputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

/**
 * TLS through the official Java client (JSSE): one-way TLS (the node's
 * certificate checked against the CA and its tls-name, no client
 * certificate) and mutual TLS with PKI login (AuthMode.PKI: the client's
 * certificate names the user), with the refusals a user meets: another
 * tls-name, another CA, a TLS client on the plain port, a plain client on
 * the TLS port, no client certificate, a certificate naming no user.
 *
 * <p>tests/java/run.sh starts the nodes (tests/python/with_tls_nodes.py,
 * the PKI made by the tls_certs example) and runs {@code mvn test
 * -Dtest=TlsTest} with BOLIDE_TLS_DIR, BOLIDE_TLS_PORT and
 * BOLIDE_PLAIN_PORT (a node with {@code tls-authenticate-client false}),
 * BOLIDE_MTLS_PORT (a secured node asking for client certificates).
 */
class TlsTest {
    static final String NS = "test";
    static final String TLS_NAME = "bolide-node";

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            fail(name + " is not set: run this through tests/java/run.sh");
        }
        return v;
    }

    static Path pki() {
        return Path.of(env("BOLIDE_TLS_DIR"));
    }

    static Certificate certificate(String file) throws Exception {
        byte[] pem = Files.readAllBytes(pki().resolve(file));
        return CertificateFactory.getInstance("X.509").generateCertificate(new ByteArrayInputStream(pem));
    }

    /** A PKCS#8 PEM key (what the tls_certs example writes), ECDSA P-256. */
    static PrivateKey privateKey(String file) throws Exception {
        String pem = Files.readString(pki().resolve(file));
        String body = pem.replaceAll("-----[A-Z ]+-----", "").replaceAll("\\s", "");
        return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(body)));
    }

    /** An SSLContext trusting {@code ca}, presenting {@code cert} (null: none). */
    static SSLContext context(String ca, String cert) throws Exception {
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        trust.setCertificateEntry("ca", certificate(ca));
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        KeyManagerFactory kmf = null;
        if (cert != null) {
            char[] password = "unused".toCharArray();
            KeyStore keys = KeyStore.getInstance("PKCS12");
            keys.load(null, null);
            keys.setKeyEntry("client", privateKey(cert + ".key"), password,
                    new Certificate[] {certificate(cert + ".pem")});
            kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(keys, password);
        }
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
        return context;
    }

    static ClientPolicy policy(String ca, String cert) throws Exception {
        ClientPolicy policy = new ClientPolicy();
        policy.timeout = 5000;
        policy.loginTimeout = 5000;
        policy.failIfNotConnected = true;
        policy.tlsPolicy = new TlsPolicy();
        policy.tlsPolicy.context = context(ca, cert);
        return policy;
    }

    static AerospikeClient connect(ClientPolicy policy, String tlsName, int port) {
        return new AerospikeClient(policy, new Host("127.0.0.1", tlsName, port));
    }

    /** Connecting must fail, or no request may get through. */
    static AerospikeException refused(String what, Executable connectAndWrite) {
        return assertThrows(AerospikeException.class, connectAndWrite, what + ": connected and wrote");
    }

    /** The node's result code anywhere in the exception's causes. */
    static boolean carries(Throwable t, int code) {
        for (; t != null; t = t.getCause()) {
            if (t instanceof AerospikeException ae
                    && (ae.getResultCode() == code || String.valueOf(ae.getMessage()).contains("Error " + code + ":"))) {
                return true;
            }
        }
        return false;
    }

    @Test
    @Timeout(120)
    void oneWayTlsServesPutsGetsBatchesAndInfo() throws Exception {
        int port = Integer.parseInt(env("BOLIDE_TLS_PORT"));
        try (AerospikeClient client = connect(policy("ca.pem", null), TLS_NAME, port)) {
            assertTrue(client.isConnected());
            List<Key> keys = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                Key key = new Key(NS, "java_tls", i);
                client.put(null, key, new Bin("n", i), new Bin("s", "value-" + i));
                keys.add(key);
            }
            Record[] records = client.get(null, keys.toArray(new Key[0]));
            for (int i = 0; i < records.length; i++) {
                assertNotNull(records[i], "record " + i);
                assertEquals(i, records[i].getInt("n"));
                assertEquals("value-" + i, records[i].getString("s"));
            }
            // A value larger than a TLS record comes back whole.
            byte[] big = new byte[200_000];
            for (int i = 0; i < big.length; i++) {
                big[i] = (byte) (i * 31);
            }
            Key bigKey = new Key(NS, "java_tls", "big");
            client.put(null, bigKey, new Bin("b", big));
            assertTrue(java.util.Arrays.equals(big, (byte[]) client.get(null, bigKey).getValue("b")));
            Node node = client.getNodes()[0];
            assertEquals("127.0.0.1:" + port, Info.request(null, node, "service-tls-std"));
        }
    }

    @Test
    @Timeout(120)
    void oneWayTlsRefusals() throws Exception {
        int port = Integer.parseInt(env("BOLIDE_TLS_PORT"));
        int plain = Integer.parseInt(env("BOLIDE_PLAIN_PORT"));
        refused("a tls-name the certificate does not carry", () -> {
            try (AerospikeClient c = connect(policy("ca.pem", null), "not-the-node", port)) {
                c.put(null, new Key(NS, "java_tls", "never"), new Bin("n", 1));
            }
        });
        refused("a node certificate from another CA", () -> {
            try (AerospikeClient c = connect(policy("other-ca.pem", null), TLS_NAME, port)) {
                c.put(null, new Key(NS, "java_tls", "never"), new Bin("n", 1));
            }
        });
        refused("a TLS client on the plain port", () -> {
            try (AerospikeClient c = connect(policy("ca.pem", null), TLS_NAME, plain)) {
                c.put(null, new Key(NS, "java_tls", "never"), new Bin("n", 1));
            }
        });
        refused("a plain client on the TLS port", () -> {
            ClientPolicy p = new ClientPolicy();
            p.timeout = 3000;
            p.failIfNotConnected = true;
            try (AerospikeClient c = new AerospikeClient(p, new Host("127.0.0.1", port))) {
                c.put(null, new Key(NS, "java_tls", "never"), new Bin("n", 1));
            }
        });
        // The node serves on.
        try (AerospikeClient client = connect(policy("ca.pem", null), TLS_NAME, port)) {
            client.put(null, new Key(NS, "java_tls", "after"), new Bin("n", 7));
            assertEquals(7, client.get(null, new Key(NS, "java_tls", "after")).getInt("n"));
        }
    }

    @Test
    @Timeout(120)
    void mutualTlsWithPkiLogin() throws Exception {
        int port = Integer.parseInt(env("BOLIDE_MTLS_PORT"));
        // admin (a password) makes client-a a PKI user: the hash of
        // "nopassword" marks a user without a password.
        ClientPolicy adminPolicy = policy("ca.pem", "client");
        adminPolicy.user = "admin";
        adminPolicy.password = "admin";
        try (AerospikeClient admin = connect(adminPolicy, TLS_NAME, port)) {
            try {
                admin.dropUser(null, "client-a");
            } catch (AerospikeException e) {
                assertEquals(ResultCode.INVALID_USER, e.getResultCode());
            }
            admin.createUser(null, "client-a", "nopassword", List.of("read-write"));
        }
        // PKI: no user, no password; the certificate (CN client-a) says who.
        ClientPolicy pki = policy("ca.pem", "client");
        pki.authMode = AuthMode.PKI;
        try (AerospikeClient client = connect(pki, TLS_NAME, port)) {
            for (int i = 0; i < 50; i++) {
                client.put(null, new Key(NS, "java_pki", i), new Bin("n", i));
            }
            for (int i = 0; i < 50; i++) {
                assertEquals(i, client.get(null, new Key(NS, "java_pki", i)).getInt("n"));
            }
            User user = client.queryUser(null, "client-a");
            assertEquals(List.of("read-write"), user.roles);
            // client-a administers no users.
            AerospikeException e = assertThrows(AerospikeException.class,
                    () -> client.createUser(null, "java-mallory", "x", List.of("read")));
            assertEquals(ResultCode.ROLE_VIOLATION, e.getResultCode());
        }
        // No client certificate: the handshake is refused.
        ClientPolicy none = policy("ca.pem", null);
        none.authMode = AuthMode.PKI;
        refused("no client certificate", () -> {
            try (AerospikeClient c = connect(none, TLS_NAME, port)) {
                c.put(null, new Key(NS, "java_pki", "never"), new Bin("n", 1));
            }
        });
        // A certificate from the CA naming no user: the login is refused.
        ClientPolicy nobody = policy("ca.pem", "client-c");
        nobody.authMode = AuthMode.PKI;
        AerospikeException e = refused("a certificate naming no user", () -> {
            try (AerospikeClient c = connect(nobody, TLS_NAME, port)) {
                c.put(null, new Key(NS, "java_pki", "never"), new Bin("n", 1));
            }
        });
        assertTrue(carries(e, ResultCode.INVALID_USER), "want INVALID_USER (60): " + e);
        // client-a has no password to log in with.
        ClientPolicy byPassword = policy("ca.pem", "client");
        byPassword.user = "client-a";
        byPassword.password = "nopassword";
        e = refused("a PKI user's password login", () -> {
            try (AerospikeClient c = connect(byPassword, TLS_NAME, port)) {
                c.put(null, new Key(NS, "java_pki", "never"), new Bin("n", 1));
            }
        });
        assertTrue(carries(e, ResultCode.INVALID_PASSWORD), "want INVALID_PASSWORD (62): " + e);
    }
}
