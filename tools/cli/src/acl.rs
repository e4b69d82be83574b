//! `bolide acl …`: users, roles, privileges, allowlists and quotas of a
//! secured cluster, as asadm's `manage acl` and `show users|roles`, through
//! the official Rust client's admin API (log in with `-U/-P` as a user with
//! `user-admin`).
//!
//! Privileges are written as asadm and aql write them: `read`,
//! `read-write.test` (namespace test), `read-write.test.demo` (set demo).

use crate::admin::table;
use crate::Target;
use aerospike::{AdminPolicy, Client, Privilege, PrivilegeCode, Role, User};
use clap::Subcommand;
use comfy_table::{Cell, CellAlignment};

#[derive(Subcommand)]
pub enum AclCommand {
    /// Create a user: `create-user NAME --roles read,sys-admin` (the
    /// password is asked for unless given with --new-password, or the
    /// user is a PKI user: --pki).
    CreateUser {
        name: String,
        /// The user's new password (`--password` would be the global
        /// `-P`, the password of the -U user logging in).
        #[arg(id = "new_password", long = "new-password", value_name = "PASSWORD")]
        password: Option<String>,
        /// A user without a password, who logs in only with a client
        /// certificate naming it (PKI, over mutual TLS).
        #[arg(long, conflicts_with = "new_password")]
        pki: bool,
        /// Comma-separated roles.
        #[arg(long, value_delimiter = ',')]
        roles: Vec<String>,
    },
    /// Drop a user.
    #[command(alias = "delete-user")]
    DropUser { name: String },
    /// Set a user's password (as an administrator).
    SetPassword {
        name: String,
        /// The user's new password (`--password` would be the global
        /// `-P`, the password of the -U user logging in).
        #[arg(id = "new_password", long = "new-password", value_name = "PASSWORD")]
        password: Option<String>,
    },
    /// Change the password of the user logged in with -U.
    ChangePassword {
        /// The user's new password (`--password` would be the global
        /// `-P`, the password of the -U user logging in).
        #[arg(id = "new_password", long = "new-password", value_name = "PASSWORD")]
        password: Option<String>,
    },
    /// Grant roles to a user.
    GrantRoles {
        name: String,
        #[arg(required = true)]
        roles: Vec<String>,
    },
    /// Revoke roles from a user.
    RevokeRoles {
        name: String,
        #[arg(required = true)]
        roles: Vec<String>,
    },
    /// Create a role: `create-role NAME --privilege read.test --allow
    /// 10.0.0.0/8 --read-quota 1000`.
    CreateRole {
        name: String,
        /// A privilege (repeatable): read, read-write.test, write.test.demo, sys-admin…
        #[arg(long = "privilege")]
        privileges: Vec<String>,
        /// An allowed client address or CIDR network (repeatable).
        #[arg(long = "allow")]
        allowlist: Vec<String>,
        /// Records read per second (needs enable-quotas).
        #[arg(long, default_value_t = 0)]
        read_quota: u32,
        /// Records written per second (needs enable-quotas).
        #[arg(long, default_value_t = 0)]
        write_quota: u32,
    },
    /// Drop a role.
    #[command(alias = "delete-role")]
    DropRole { name: String },
    /// Grant privileges to a role.
    GrantPrivileges {
        role: String,
        #[arg(required = true)]
        privileges: Vec<String>,
    },
    /// Revoke privileges from a role.
    RevokePrivileges {
        role: String,
        #[arg(required = true)]
        privileges: Vec<String>,
    },
    /// Set a role's allowlist (no address: clear it).
    Allowlist {
        role: String,
        addresses: Vec<String>,
    },
    /// Set a role's quotas (0: none).
    Quotas {
        role: String,
        #[arg(long)]
        read: u32,
        #[arg(long)]
        write: u32,
    },
    /// Show users, or one user.
    ShowUsers { name: Option<String> },
    /// Show roles, or one role.
    ShowRoles { name: Option<String> },
}

/// Parses `read`, `read.test`, `read.test.demo`.
pub fn parse_privilege(text: &str) -> Result<Privilege, String> {
    let mut parts = text.splitn(3, '.');
    let name = parts.next().unwrap_or("");
    let code = PrivilegeCode::try_from(name).map_err(|_| {
        format!(
            "unknown privilege '{name}' (user-admin, sys-admin, data-admin, udf-admin, \
             sindex-admin, read, read-write, read-write-udf, write, truncate)"
        )
    })?;
    let namespace = parts.next().filter(|ns| !ns.is_empty()).map(str::to_owned);
    let set = parts
        .next()
        .filter(|set| !set.is_empty())
        .map(str::to_owned);
    if namespace.is_some() && u8::from(&code) < 10 {
        return Err(format!("'{name}' is global only: it takes no namespace"));
    }
    Ok(Privilege::new(code, namespace, set))
}

fn privilege_text(privilege: &Privilege) -> String {
    let mut text = String::from(&privilege.code);
    if let Some(namespace) = &privilege.namespace {
        text.push('.');
        text.push_str(namespace);
        if let Some(set) = &privilege.set_name {
            text.push('.');
            text.push_str(set);
        }
    }
    text
}

fn password(given: Option<String>, prompt: &str) -> Result<String, String> {
    match given {
        Some(password) => Ok(password),
        None => crate::login::read_password(prompt),
    }
}

pub fn run(target: &Target, command: AclCommand) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start runtime: {error}"))?;
    let policy = AdminPolicy::default();
    runtime.block_on(async {
        let client = connect(target).await?;
        let result = execute(&client, &policy, command).await;
        let _ = client.close().await;
        result
    })
}

async fn connect(target: &Target) -> Result<Client, String> {
    let seed = target.client_seed();
    match tokio::time::timeout(
        target.timeout * 3,
        Client::new(&target.client_policy(), &seed),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(format!("cannot connect to {seed}: {error}")),
        Err(_) => Err(format!("cannot connect to {seed}: timed out")),
    }
}

async fn execute(client: &Client, policy: &AdminPolicy, command: AclCommand) -> Result<(), String> {
    let failed = |error: aerospike::Error| error.to_string();
    match command {
        AclCommand::CreateUser {
            name,
            password: given,
            pki,
            roles,
        } => {
            // The clients mark a user without a password by sending the
            // hash of this word (Aerospike 8.1's PKI users).
            let password = if pki {
                "nopassword".to_owned()
            } else {
                password(given, &format!("Password for {name}: "))?
            };
            let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
            client
                .create_user(policy, &name, &password, &roles)
                .await
                .map_err(failed)?;
            println!("Created user {name}");
        }
        AclCommand::DropUser { name } => {
            client.drop_user(policy, &name).await.map_err(failed)?;
            println!("Dropped user {name}");
        }
        AclCommand::SetPassword {
            name,
            password: given,
        } => {
            let password = password(given, &format!("New password for {name}: "))?;
            client
                .change_password(policy, &name, &password)
                .await
                .map_err(failed)?;
            println!("Set the password of {name}");
        }
        AclCommand::ChangePassword { password: given } => {
            let Some(credentials) = crate::login::credentials() else {
                return Err(
                    "change-password changes the password of the user given with -U".into(),
                );
            };
            let password = password(given, "New password: ")?;
            client
                .change_password(policy, &credentials.user, &password)
                .await
                .map_err(failed)?;
            println!("Changed the password of {}", credentials.user);
        }
        AclCommand::GrantRoles { name, roles } => {
            let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
            client
                .grant_roles(policy, &name, &roles)
                .await
                .map_err(failed)?;
            println!("Granted {} to {name}", roles.join(", "));
        }
        AclCommand::RevokeRoles { name, roles } => {
            let roles: Vec<&str> = roles.iter().map(String::as_str).collect();
            client
                .revoke_roles(policy, &name, &roles)
                .await
                .map_err(failed)?;
            println!("Revoked {} from {name}", roles.join(", "));
        }
        AclCommand::CreateRole {
            name,
            privileges,
            allowlist,
            read_quota,
            write_quota,
        } => {
            let privileges = privileges
                .iter()
                .map(|p| parse_privilege(p))
                .collect::<Result<Vec<_>, _>>()?;
            let allowlist: Vec<&str> = allowlist.iter().map(String::as_str).collect();
            client
                .create_role(
                    policy,
                    &name,
                    &privileges,
                    &allowlist,
                    read_quota,
                    write_quota,
                )
                .await
                .map_err(failed)?;
            println!("Created role {name}");
        }
        AclCommand::DropRole { name } => {
            client.drop_role(policy, &name).await.map_err(failed)?;
            println!("Dropped role {name}");
        }
        AclCommand::GrantPrivileges { role, privileges } => {
            let privileges = privileges
                .iter()
                .map(|p| parse_privilege(p))
                .collect::<Result<Vec<_>, _>>()?;
            client
                .grant_privileges(policy, &role, &privileges)
                .await
                .map_err(failed)?;
            println!("Granted privileges to {role}");
        }
        AclCommand::RevokePrivileges { role, privileges } => {
            let privileges = privileges
                .iter()
                .map(|p| parse_privilege(p))
                .collect::<Result<Vec<_>, _>>()?;
            client
                .revoke_privileges(policy, &role, &privileges)
                .await
                .map_err(failed)?;
            println!("Revoked privileges from {role}");
        }
        AclCommand::Allowlist { role, addresses } => {
            let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
            client
                .set_allowlist(policy, &role, &addresses)
                .await
                .map_err(failed)?;
            if addresses.is_empty() {
                println!("Cleared the allowlist of {role}");
            } else {
                println!("Set the allowlist of {role}");
            }
        }
        AclCommand::Quotas { role, read, write } => {
            client
                .set_quotas(policy, &role, read, write)
                .await
                .map_err(failed)?;
            println!("Set the quotas of {role}");
        }
        AclCommand::ShowUsers { name } => {
            let users = client
                .query_users(policy, name.as_deref())
                .await
                .map_err(failed)?;
            print_users(&users);
        }
        AclCommand::ShowRoles { name } => {
            let roles = client
                .query_roles(policy, name.as_deref())
                .await
                .map_err(failed)?;
            print_roles(&roles);
        }
    }
    Ok(())
}

fn right(value: impl ToString) -> Cell {
    Cell::new(value.to_string()).set_alignment(CellAlignment::Right)
}

fn print_users(users: &[User]) {
    let mut out = table(&["User", "Roles", "Connections", "Read quota", "Write quota"]);
    for user in users {
        out.add_row(vec![
            Cell::new(&user.user),
            Cell::new(user.roles.join(", ")),
            right(user.conns_in_use),
            right(user.read_info.first().copied().unwrap_or(0)),
            right(user.write_info.first().copied().unwrap_or(0)),
        ]);
    }
    println!("{out}");
}

fn print_roles(roles: &[Role]) {
    let mut out = table(&[
        "Role",
        "Privileges",
        "Allowlist",
        "Read quota",
        "Write quota",
    ]);
    for role in roles {
        out.add_row(vec![
            Cell::new(&role.name),
            Cell::new(
                role.privileges
                    .iter()
                    .map(privilege_text)
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            Cell::new(role.allowlist.join(", ")),
            right(role.read_quota),
            right(role.write_quota),
        ]);
    }
    println!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_parse_as_asadm_writes_them() {
        for text in [
            "read",
            "read-write.test",
            "write.test.demo",
            "sys-admin",
            "truncate.bar",
        ] {
            let privilege = parse_privilege(text).expect(text);
            assert_eq!(privilege_text(&privilege), text);
        }
        assert!(parse_privilege("sys-admin.test").is_err());
        assert!(parse_privilege("reed").is_err());
    }
}
