// The official Go client's admin API against a secured bolided: users,
// roles, privileges, allowlists and quotas made, changed, queried and
// dropped, logins with user and password, and refusals with their result
// codes (81 role violation, 82 not allowlisted, 83 quota exceeded).
// tests/python/test_security_clients.py starts a node with `security {
// enable-quotas true }` and runs this test with BOLIDE_SECURE_PORT; run by
// hand without it, it fails.
package client

import (
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	as "github.com/aerospike/aerospike-client-go/v8"
	"github.com/aerospike/aerospike-client-go/v8/types"
)

func securePort(t *testing.T) int {
	t.Helper()
	port, err := strconv.Atoi(os.Getenv("BOLIDE_SECURE_PORT"))
	if err != nil {
		t.Fatalf("BOLIDE_SECURE_PORT not set (tests/python/test_security_clients.py runs this test): %v", err)
	}
	return port
}

func login(port int, user, password string) (*as.Client, as.Error) {
	policy := as.NewClientPolicy()
	policy.User = user
	policy.Password = password
	policy.Timeout = 5 * time.Second
	policy.MinConnectionsPerNode = 0
	return as.NewClientWithPolicy(policy, "127.0.0.1", port)
}

func mustLogin(t *testing.T, port int, user, password string) *as.Client {
	t.Helper()
	client, err := login(port, user, password)
	if err != nil {
		t.Fatalf("login as %s: %v", user, err)
	}
	t.Cleanup(client.Close)
	return client
}

// expectCode fails unless err is an Aerospike error with result code want.
func expectCode(t *testing.T, what string, err error, want types.ResultCode) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want result code %d", what, want)
	}
	aerr, ok := err.(as.Error)
	if !ok || !aerr.Matches(want) {
		t.Fatalf("%s: %v, want result code %d", what, err, want)
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func roleNamed(t *testing.T, admin *as.Client, name string) *as.Role {
	t.Helper()
	role, err := admin.QueryRole(nil, name)
	ok(t, "QueryRole "+name, err)
	return role
}

func sortedRoles(t *testing.T, admin *as.Client, user string) []string {
	t.Helper()
	info, err := admin.QueryUser(nil, user)
	ok(t, "QueryUser "+user, err)
	if info.User != user {
		t.Fatalf("QueryUser %s answered user %q", user, info.User)
	}
	roles := append([]string(nil), info.Roles...)
	sort.Strings(roles)
	return roles
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSecurityLoginAndRefusals(t *testing.T) {
	port := securePort(t)

	// No user: the node refuses the connection.
	if c, err := as.NewClientWithPolicy(func() *as.ClientPolicy {
		p := as.NewClientPolicy()
		p.Timeout = 3 * time.Second
		return p
	}(), "127.0.0.1", port); err == nil {
		// The client may connect (tend needs no login on some versions);
		// then every command must be refused as not authenticated.
		k, _ := as.NewKey(ns, "go_sec", "anon")
		_, gerr := c.Get(nil, k)
		c.Close()
		expectCode(t, "Get without a login", gerr, types.NOT_AUTHENTICATED)
	}

	// Wrong password (62) and unknown user (60).
	if c, err := login(port, "admin", "wrong"); err == nil {
		c.Close()
		t.Fatal("login with a wrong password succeeded")
	} else if !err.Matches(types.INVALID_PASSWORD) {
		t.Fatalf("login with a wrong password: %v, want result code %d", err, types.INVALID_PASSWORD)
	}
	if c, err := login(port, "nobody_go", "x"); err == nil {
		c.Close()
		t.Fatal("login as an unknown user succeeded")
	} else if !err.Matches(types.INVALID_USER) {
		t.Fatalf("login as an unknown user: %v, want result code %d", err, types.INVALID_USER)
	}

	// The default admin administers users and may not touch data.
	admin := mustLogin(t, port, "admin", "admin")
	if roles := sortedRoles(t, admin, "admin"); !equal(roles, []string{"user-admin"}) {
		t.Fatalf("admin's roles: %v, want [user-admin]", roles)
	}
	k, _ := as.NewKey(ns, "go_sec", "admin-put")
	expectCode(t, "admin's Put", admin.Put(nil, k, as.BinMap{"a": 1}), types.ROLE_VIOLATION)
}

func TestSecurityUsersRolesPrivilegesAllowlistsQuotas(t *testing.T) {
	port := securePort(t)
	admin := mustLogin(t, port, "admin", "admin")
	const user, role = "go_app", "go_app_role"
	admin.DropUser(nil, user)
	admin.DropRole(nil, role)

	// CreateUser, QueryUser.
	ok(t, "CreateUser", admin.CreateUser(nil, user, "pw-1", []string{"read"}))
	expectCode(t, "CreateUser again", admin.CreateUser(nil, user, "pw-1", []string{"read"}), types.USER_ALREADY_EXISTS)
	if roles := sortedRoles(t, admin, user); !equal(roles, []string{"read"}) {
		t.Fatalf("roles after CreateUser: %v", roles)
	}

	// A reader reads and is refused writes (81).
	app := mustLogin(t, port, user, "pw-1")
	key, _ := as.NewKey(ns, "go_sec", "k1")
	otherKey, _ := as.NewKey(ns, "go_other", "k1")
	_, err := app.Get(nil, key)
	expectCode(t, "reader's Get of a missing record", err, types.KEY_NOT_FOUND_ERROR)
	expectCode(t, "reader's Put", app.Put(nil, key, as.BinMap{"v": 1}), types.ROLE_VIOLATION)

	// CreateRole with a scoped privilege, GrantRoles: the user may now
	// write in that set, and only there.
	ok(t, "CreateRole", admin.CreateRole(nil, role,
		[]as.Privilege{{Code: as.ReadWrite, Namespace: ns, SetName: "go_sec"}}, nil, 0, 0))
	expectCode(t, "CreateRole again", admin.CreateRole(nil, role,
		[]as.Privilege{{Code: as.Read}}, nil, 0, 0), types.ROLE_ALREADY_EXISTS)
	ok(t, "GrantRoles", admin.GrantRoles(nil, user, []string{role}))
	if roles := sortedRoles(t, admin, user); !equal(roles, []string{role, "read"}) {
		t.Fatalf("roles after GrantRoles: %v", roles)
	}
	expectCode(t, "GrantRoles of a missing role", admin.GrantRoles(nil, user, []string{"no_such_role"}), types.INVALID_ROLE)
	ok(t, "Put in the granted set", app.Put(nil, key, as.BinMap{"v": 7}))
	record, err := app.Get(nil, key)
	ok(t, "Get after Put", err)
	if record.Bins["v"] != 7 {
		t.Fatalf("read back %v", record.Bins)
	}
	expectCode(t, "Put in another set", app.Put(nil, otherKey, as.BinMap{"v": 1}), types.ROLE_VIOLATION)

	// GrantPrivileges / RevokePrivileges, QueryRole.
	ok(t, "GrantPrivileges", admin.GrantPrivileges(nil, role,
		[]as.Privilege{{Code: as.Write, Namespace: ns, SetName: "go_other"}, {Code: as.Truncate, Namespace: ns}}))
	got := roleNamed(t, admin, role)
	want := []as.Privilege{
		{Code: as.ReadWrite, Namespace: ns, SetName: "go_sec"},
		{Code: as.Write, Namespace: ns, SetName: "go_other"},
		{Code: as.Truncate, Namespace: ns},
	}
	if len(got.Privileges) != len(want) {
		t.Fatalf("privileges after GrantPrivileges: %+v", got.Privileges)
	}
	for _, p := range want {
		found := false
		for _, q := range got.Privileges {
			found = found || q == p
		}
		if !found {
			t.Fatalf("privilege %+v missing from %+v", p, got.Privileges)
		}
	}
	ok(t, "Put with the granted write", app.Put(nil, otherKey, as.BinMap{"v": 2}))
	ok(t, "RevokePrivileges", admin.RevokePrivileges(nil, role,
		[]as.Privilege{{Code: as.Write, Namespace: ns, SetName: "go_other"}, {Code: as.Truncate, Namespace: ns}}))
	if got := roleNamed(t, admin, role); len(got.Privileges) != 1 || got.Privileges[0] != want[0] {
		t.Fatalf("privileges after RevokePrivileges: %+v", got.Privileges)
	}
	expectCode(t, "Put after the revoke", app.Put(nil, otherKey, as.BinMap{"v": 3}), types.ROLE_VIOLATION)

	// QueryRoles: the predefined roles and ours.
	roles, err := admin.QueryRoles(nil)
	ok(t, "QueryRoles", err)
	names := map[string]bool{}
	for _, r := range roles {
		names[r.Name] = true
	}
	for _, name := range []string{"read", "read-write", "read-write-udf", "write", "truncate",
		"sindex-admin", "udf-admin", "data-admin", "sys-admin", "user-admin", role} {
		if !names[name] {
			t.Fatalf("QueryRoles lacks %s: %v", name, names)
		}
	}

	// SetWhitelist: an allowlist without this address refuses the login
	// (82); one with it admits it again.
	ok(t, "SetWhitelist elsewhere", admin.SetWhitelist(nil, role, []string{"10.9.8.7", "192.168.77.0/24"}))
	if got := roleNamed(t, admin, role); !equal(got.Whitelist, []string{"10.9.8.7", "192.168.77.0/24"}) {
		t.Fatalf("allowlist: %v", got.Whitelist)
	}
	if c, err := login(port, user, "pw-1"); err == nil {
		c.Close()
		t.Fatal("login from outside the allowlist succeeded")
	} else if !err.Matches(types.NOT_WHITELISTED) {
		t.Fatalf("login from outside the allowlist: %v, want result code %d", err, types.NOT_WHITELISTED)
	}
	expectCode(t, "SetWhitelist with a bad address", admin.SetWhitelist(nil, role, []string{"not-an-address"}), types.INVALID_WHITELIST)
	ok(t, "SetWhitelist here", admin.SetWhitelist(nil, role, []string{"127.0.0.1"}))
	mustLogin(t, port, user, "pw-1").Close()
	ok(t, "SetWhitelist cleared", admin.SetWhitelist(nil, role, nil))
	if got := roleNamed(t, admin, role); len(got.Whitelist) != 0 {
		t.Fatalf("allowlist after clearing: %v", got.Whitelist)
	}

	// SetQuotas: shown by QueryRole, and enforced (83).
	ok(t, "SetQuotas", admin.SetQuotas(nil, role, 5, 20))
	if got := roleNamed(t, admin, role); got.ReadQuota != 5 || got.WriteQuota != 20 {
		t.Fatalf("quotas: read %d write %d", got.ReadQuota, got.WriteQuota)
	}
	refused := false
	deadline := time.Now().Add(5 * time.Second)
	for reads := 0; reads < 2000 && time.Now().Before(deadline) && !refused; reads++ {
		_, err := app.Get(nil, key)
		if err != nil {
			expectCode(t, "Get over the read quota", err, types.QUOTA_EXCEEDED)
			refused = true
		}
	}
	if !refused {
		t.Fatal("reads past a quota of 5 per second were never refused")
	}
	ok(t, "SetQuotas off", admin.SetQuotas(nil, role, 0, 0))

	// ChangePassword by the user itself: the old password stops working.
	ok(t, "ChangePassword", app.ChangePassword(nil, user, "pw-2"))
	if c, err := login(port, user, "pw-1"); err == nil {
		c.Close()
		t.Fatal("login with the old password succeeded")
	} else if !err.Matches(types.INVALID_PASSWORD) {
		t.Fatalf("login with the old password: %v, want result code %d", err, types.INVALID_PASSWORD)
	}
	mustLogin(t, port, user, "pw-2").Close()
	// And by user-admin (SetPassword in the wire protocol).
	ok(t, "ChangePassword by admin", admin.ChangePassword(nil, user, "pw-3"))
	mustLogin(t, port, user, "pw-3").Close()

	// RevokeRoles, QueryUsers.
	ok(t, "RevokeRoles", admin.RevokeRoles(nil, user, []string{"read"}))
	if roles := sortedRoles(t, admin, user); !equal(roles, []string{role}) {
		t.Fatalf("roles after RevokeRoles: %v", roles)
	}
	users, err := admin.QueryUsers(nil)
	ok(t, "QueryUsers", err)
	seen := map[string]bool{}
	for _, u := range users {
		seen[u.User] = true
	}
	if !seen["admin"] || !seen[user] {
		t.Fatalf("QueryUsers: %v", seen)
	}

	// DropRole: the user keeps the name but loses the privileges.
	ok(t, "DropRole", admin.DropRole(nil, role))
	_, err = admin.QueryRole(nil, role)
	expectCode(t, "QueryRole of a dropped role", err, types.INVALID_ROLE)
	app3 := mustLogin(t, port, user, "pw-3")
	_, err = app3.Get(nil, key)
	expectCode(t, "Get without any privilege", err, types.ROLE_VIOLATION)

	// DropUser: gone for QueryUser and for logins.
	ok(t, "DropUser", admin.DropUser(nil, user))
	_, err = admin.QueryUser(nil, user)
	expectCode(t, "QueryUser of a dropped user", err, types.INVALID_USER)
	if c, err := login(port, user, "pw-3"); err == nil {
		c.Close()
		t.Fatal("a dropped user logged in")
	} else if !err.Matches(types.INVALID_USER) {
		t.Fatalf("login of a dropped user: %v, want result code %d", err, types.INVALID_USER)
	}
	expectCode(t, "DropUser again", admin.DropUser(nil, user), types.INVALID_USER)

	// A user without user-admin may not administer.
	ok(t, "CreateUser reader", admin.CreateUser(nil, "go_plain", "pw", []string{"read-write"}))
	defer admin.DropUser(nil, "go_plain")
	plain := mustLogin(t, port, "go_plain", "pw")
	expectCode(t, "CreateUser by a non-admin", plain.CreateUser(nil, "go_x", "pw", []string{"read"}), types.ROLE_VIOLATION)
	expectCode(t, "CreateRole by a non-admin", plain.CreateRole(nil, "go_x", []as.Privilege{{Code: as.Read}}, nil, 0, 0), types.ROLE_VIOLATION)
}
