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
import com.aerospike.client.Key;
import com.aerospike.client.Record;
import com.aerospike.client.ResultCode;
import com.aerospike.client.admin.Privilege;
import com.aerospike.client.admin.PrivilegeCode;
import com.aerospike.client.admin.Role;
import com.aerospike.client.admin.User;
import com.aerospike.client.policy.ClientPolicy;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

/**
 * The official Java client's admin API against a secured bolided: users,
 * roles, privileges, allowlists and quotas made, changed, queried and
 * dropped; logins with user and password; refusals with their result codes
 * (81 role violation, 82 not allowlisted, 83 quota exceeded).
 *
 * <p>tests/python/test_security_clients.py starts a node with {@code
 * security { enable-quotas true }} and runs {@code mvn test
 * -Dtest=SecurityAdminTest} with BOLIDE_SECURE_PORT set.
 */
class SecurityAdminTest {
    static final String NS = "test";

    static int port() {
        String v = System.getenv("BOLIDE_SECURE_PORT");
        if (v == null || v.isEmpty()) {
            fail("BOLIDE_SECURE_PORT is not set: tests/python/test_security_clients.py runs this test");
        }
        return Integer.parseInt(v);
    }

    static AerospikeClient login(String user, String password) {
        ClientPolicy policy = new ClientPolicy();
        policy.user = user;
        policy.password = password;
        policy.timeout = 5000;
        policy.failIfNotConnected = true;
        return new AerospikeClient(policy, new Host("127.0.0.1", port()));
    }

    /** The result code of the AerospikeException {@code action} throws. */
    static int refusal(String what, Executable action) {
        AerospikeException e = assertThrows(AerospikeException.class, action, what + " succeeded");
        return e.getResultCode();
    }

    static void expectCode(String what, int want, Executable action) {
        assertEquals(want, refusal(what, action), what + ": result code");
    }

    /** A failed login: the client refuses to connect, naming the node's answer. */
    static void expectLoginRefused(String what, String user, String password, int want) {
        AerospikeException e = assertThrows(AerospikeException.class, () -> login(user, password).close(), what);
        // The client wraps the seed's failure: the node's code is the
        // exception's, a cause's, or in the message of the seeds' errors
        // ("127.0.0.1 3000 Error 62: Login failed").
        Throwable t = e;
        while (t != null) {
            if (t instanceof AerospikeException ae && ae.getResultCode() == want) {
                return;
            }
            if (t.getMessage() != null && t.getMessage().contains(" Error " + want + ":")) {
                return;
            }
            t = t.getCause();
        }
        fail(what + ": " + e + ", want result code " + want);
    }

    static Privilege privilege(PrivilegeCode code, String ns, String set) {
        Privilege p = new Privilege();
        p.code = code;
        p.namespace = ns;
        p.setName = set;
        return p;
    }

    static Set<String> privileges(Role role) {
        Set<String> out = new TreeSet<>();
        for (Privilege p : role.privileges) {
            out.add(p.code.name() + "/" + (p.namespace == null ? "" : p.namespace) + "/" + (p.setName == null ? "" : p.setName));
        }
        return out;
    }

    static Set<String> roles(AerospikeClient admin, String user) {
        User info = admin.queryUser(null, user);
        assertNotNull(info, "queryUser " + user);
        assertEquals(user, info.name);
        return new TreeSet<>(info.roles);
    }

    @Test
    @Timeout(120)
    void adminApiLoginsAndRefusals() {
        final String user = "java_app";
        final String role = "java_app_role";

        expectLoginRefused("wrong password", "admin", "wrong", ResultCode.INVALID_PASSWORD);
        expectLoginRefused("unknown user", "nobody_java", "x", ResultCode.INVALID_USER);

        try (AerospikeClient admin = login("admin", "admin")) {
            assertEquals(Set.of("user-admin"), roles(admin, "admin"));
            Key adminKey = new Key(NS, "java_sec", "admin-put");
            expectCode("admin's put", ResultCode.ROLE_VIOLATION, () -> admin.put(null, adminKey, new Bin("a", 1)));

            try { admin.dropUser(null, user); } catch (AerospikeException ignored) { }
            try { admin.dropRole(null, role); } catch (AerospikeException ignored) { }

            // createUser / queryUser; a reader reads and may not write.
            admin.createUser(null, user, "pw-1", List.of("read"));
            expectCode("createUser again", ResultCode.USER_ALREADY_EXISTS,
                () -> admin.createUser(null, user, "pw-1", List.of("read")));
            assertEquals(Set.of("read"), roles(admin, user));
            Key key = new Key(NS, "java_sec", "k1");
            Key other = new Key(NS, "java_other", "k1");
            try (AerospikeClient app = login(user, "pw-1")) {
                assertEquals(null, app.get(null, key));
                expectCode("reader's put", ResultCode.ROLE_VIOLATION, () -> app.put(null, key, new Bin("v", 1)));
            }

            // createRole (scoped), grantRoles: writes in that set only.
            admin.createRole(null, role, List.of(privilege(PrivilegeCode.READ_WRITE, NS, "java_sec")), List.of(), 0, 0);
            expectCode("createRole again", ResultCode.ROLE_ALREADY_EXISTS,
                () -> admin.createRole(null, role, List.of(privilege(PrivilegeCode.READ, null, null))));
            admin.grantRoles(null, user, List.of(role));
            assertEquals(Set.of("read", role), roles(admin, user));
            expectCode("grantRoles of a missing role", ResultCode.INVALID_ROLE,
                () -> admin.grantRoles(null, user, List.of("no_such_role")));
            try (AerospikeClient app = login(user, "pw-1")) {
                app.put(null, key, new Bin("v", 7));
                Record record = app.get(null, key);
                assertEquals(7L, record.getLong("v"));
                expectCode("put in another set", ResultCode.ROLE_VIOLATION, () -> app.put(null, other, new Bin("v", 1)));

                // grantPrivileges / revokePrivileges / queryRole.
                admin.grantPrivileges(null, role, List.of(
                    privilege(PrivilegeCode.WRITE, NS, "java_other"), privilege(PrivilegeCode.TRUNCATE, NS, null)));
                assertEquals(Set.of("READ_WRITE/test/java_sec", "WRITE/test/java_other", "TRUNCATE/test/"),
                    privileges(admin.queryRole(null, role)));
                app.put(null, other, new Bin("v", 2));
                admin.revokePrivileges(null, role, List.of(
                    privilege(PrivilegeCode.WRITE, NS, "java_other"), privilege(PrivilegeCode.TRUNCATE, NS, null)));
                assertEquals(Set.of("READ_WRITE/test/java_sec"), privileges(admin.queryRole(null, role)));
                expectCode("put after the revoke", ResultCode.ROLE_VIOLATION, () -> app.put(null, other, new Bin("v", 3)));

                // setQuotas: queried and enforced (83).
                admin.setQuotas(null, role, 5, 20);
                Role withQuotas = admin.queryRole(null, role);
                assertEquals(5, withQuotas.readQuota);
                assertEquals(20, withQuotas.writeQuota);
                int code = 0;
                long deadline = System.currentTimeMillis() + 5000;
                for (int i = 0; i < 2000 && code == 0 && System.currentTimeMillis() < deadline; i++) {
                    try {
                        app.get(null, key);
                    } catch (AerospikeException e) {
                        code = e.getResultCode();
                    }
                }
                assertEquals(ResultCode.QUOTA_EXCEEDED, code, "reads past a quota of 5 per second");
                admin.setQuotas(null, role, 0, 0);

                // changePassword by the user itself.
                app.changePassword(null, user, "pw-2");
            }
            expectLoginRefused("old password", user, "pw-1", ResultCode.INVALID_PASSWORD);
            login(user, "pw-2").close();
            // changePassword of another user by user-admin (SET_PASSWORD).
            admin.changePassword(null, user, "pw-3");
            login(user, "pw-3").close();

            // queryRoles: the predefined roles and ours.
            Set<String> names = new HashSet<>();
            for (Role r : admin.queryRoles(null)) {
                names.add(r.name);
            }
            for (String name : List.of("read", "read-write", "read-write-udf", "write", "truncate",
                    "sindex-admin", "udf-admin", "data-admin", "sys-admin", "user-admin", role)) {
                assertTrue(names.contains(name), "queryRoles lacks " + name + ": " + names);
            }

            // setWhitelist: elsewhere refuses the login (82), here admits it.
            admin.setWhitelist(null, role, List.of("10.9.8.7", "192.168.77.0/24"));
            assertEquals(List.of("10.9.8.7", "192.168.77.0/24"), admin.queryRole(null, role).whitelist);
            expectLoginRefused("login outside the allowlist", user, "pw-3", ResultCode.NOT_WHITELISTED);
            expectCode("bad allowlist", ResultCode.INVALID_WHITELIST,
                () -> admin.setWhitelist(null, role, List.of("not-an-address")));
            admin.setWhitelist(null, role, List.of("127.0.0.1"));
            login(user, "pw-3").close();
            admin.setWhitelist(null, role, List.of());
            List<String> cleared = admin.queryRole(null, role).whitelist;
            assertTrue(cleared == null || cleared.isEmpty(), "allowlist after clearing: " + cleared);

            // revokeRoles / queryUsers.
            admin.revokeRoles(null, user, List.of("read"));
            assertEquals(Set.of(role), roles(admin, user));
            List<String> users = new ArrayList<>();
            for (User u : admin.queryUsers(null)) {
                users.add(u.name);
            }
            assertTrue(users.contains("admin") && users.contains(user), "queryUsers: " + users);

            // dropRole: the user loses its privileges.
            admin.dropRole(null, role);
            expectCode("queryRole of a dropped role", ResultCode.INVALID_ROLE, () -> admin.queryRole(null, role));
            try (AerospikeClient app = login(user, "pw-3")) {
                expectCode("get without a privilege", ResultCode.ROLE_VIOLATION, () -> app.get(null, key));
                // A user without user-admin may not administer.
                expectCode("createUser by a non-admin", ResultCode.ROLE_VIOLATION,
                    () -> app.createUser(null, "java_x", "pw", List.of("read")));
            }

            // dropUser: gone for queries and logins.
            admin.dropUser(null, user);
            expectCode("queryUser of a dropped user", ResultCode.INVALID_USER, () -> admin.queryUser(null, user));
            expectLoginRefused("dropped user", user, "pw-3", ResultCode.INVALID_USER);
            expectCode("dropUser again", ResultCode.INVALID_USER, () -> admin.dropUser(null, user));
        }
    }
}
