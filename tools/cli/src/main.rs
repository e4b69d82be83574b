//! `bolide`: the operator's command-line tool.
//!
//! asadm-style: `bolide info`, `bolide show statistics|config|latencies
//! [namespace NS]`, `bolide asinfo CMD`; aql-style: `bolide sql` (a prompt
//! with history and line editing) or `bolide sql -c "STATEMENT"`;
//! asbackup/asrestore-style: `bolide backup`, `bolide restore` (`.asb`
//! files, docs/backup.md); `bolide acl` (users and roles); `bolide roster
//! show|set|recluster` (strong consistency, docs/strong-consistency.md).
//!
//! It talks to the nodes only through the Aerospike protocol (info requests
//! through Bolide's wire crate, records through the official `aerospike`
//! crate), so it works against Aerospike servers too. Every node is found
//! from one seed (`-h`, `-p`) through `peers-clear-std`, or over TLS
//! (`--tls-enable`, `--tls-name`, `--tls-cafile`, `--tls-certfile`,
//! `--tls-keyfile`, as asadm) through `peers-tls-std`.

#![deny(unsafe_code)]

mod acl;
mod admin;
mod backup;
mod info;
mod login;
mod progress;
mod roster;
mod sql;
mod tls;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bolide",
    version,
    disable_help_flag = true,
    about = "Bolide's command-line tool: cluster info, statistics, latencies and SQL-style record access over the Aerospike protocol"
)]
struct Arguments {
    /// Seed node's host (any node of the cluster).
    #[arg(short = 'h', long, default_value = "127.0.0.1", global = true)]
    host: String,
    /// Seed node's service port.
    #[arg(short = 'p', long, default_value_t = 3000, global = true)]
    port: u16,
    /// User to log in as on a secured cluster.
    #[arg(short = 'U', long, global = true)]
    user: Option<String>,
    /// Password of the user (asked for when -U is given without it).
    #[arg(short = 'P', long, global = true)]
    password: Option<String>,
    /// Connect with TLS (to the nodes' tls-port).
    #[arg(long, global = true)]
    tls_enable: bool,
    /// The name the nodes' certificates must carry (default: the host).
    #[arg(long, global = true)]
    tls_name: Option<String>,
    /// The CA certificates (PEM) that sign the nodes' certificates.
    #[arg(long, global = true)]
    tls_cafile: Option<std::path::PathBuf>,
    /// A directory of CA certificates.
    #[arg(long, global = true)]
    tls_capath: Option<std::path::PathBuf>,
    /// This client's certificate (PEM), for nodes that ask for one.
    #[arg(long, global = true)]
    tls_certfile: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, global = true)]
    tls_keyfile: Option<std::path::PathBuf>,
    /// Milliseconds to wait for a node's answer.
    #[arg(long, default_value_t = 5000, global = true)]
    timeout: u64,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help, global = true)]
    help: Option<bool>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A summary of every node and its namespaces.
    Info,
    /// Statistics, configuration or latencies of every node.
    Show {
        /// statistics, config or latencies
        what: ShowWhat,
        /// `namespace NS`: only that namespace.
        #[arg(num_args = 0..=2, value_names = ["namespace", "NS"])]
        filter: Vec<String>,
    },
    /// One raw info command to the seed node (like asinfo -v).
    Asinfo {
        /// The info command, e.g. 'namespace/test' or 'latencies:'.
        command: String,
        /// One `;`-separated field per line.
        #[arg(short = 'l', long)]
        lines: bool,
    },
    /// SQL-style statements (aql): a prompt, or one statement with -c.
    Sql {
        /// Run these statements (`;`-separated) and exit.
        #[arg(short = 'c', long = "command")]
        command: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Show progress on stderr even when it is not a terminal.
        #[arg(long)]
        progress: bool,
    },
    /// Back up a namespace to .asb files (asbackup's flags; docs/backup.md).
    Backup(Box<backup::BackupArgs>),
    /// Restore .asb files (asrestore's flags; docs/backup.md).
    Restore(backup::RestoreArgs),
    /// Users, roles and privileges of a secured cluster (as asadm's manage acl).
    Acl {
        #[command(subcommand)]
        command: acl::AclCommand,
    },
    /// The roster of strong-consistency namespaces (as asadm's show
    /// roster, manage roster stage and manage recluster).
    Roster {
        #[command(subcommand)]
        command: roster::RosterCommand,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ShowWhat {
    Statistics,
    Config,
    Latencies,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

/// Where to find the cluster.
#[derive(Clone, Debug)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub timeout: Duration,
}

impl Target {
    /// The official client's policy, logging in as `-U` if given.
    pub fn client_policy(&self) -> aerospike::ClientPolicy {
        let mut policy = aerospike::ClientPolicy::default();
        if let Some(credentials) = login::credentials() {
            policy.auth_mode = aerospike::AuthMode::Internal(
                credentials.user.clone(),
                credentials.password.clone(),
            );
        }
        if let Some(tls) = tls::get() {
            policy.tls_policy = Some(aerospike::TlsPolicy::new(std::sync::Arc::clone(
                &tls.config,
            )));
        }
        policy
    }

    /// The seed for the official client: `host:port`, or with TLS
    /// `host:tls-name:port`.
    pub fn client_seed(&self) -> String {
        match tls::get() {
            Some(tls) => format!(
                "{}:{}:{}",
                self.host,
                tls.name.as_deref().unwrap_or(&self.host),
                self.port
            ),
            None => self.seed(),
        }
    }

    pub fn seed(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[expect(unsafe_code, reason = "libc call restoring a signal's default action")]
fn restore_sigpipe() {
    // SAFETY: sets the default action of SIGPIPE before any thread starts;
    // no handler of this program is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    // Output piped into `head` and the like: end quietly when the reader
    // goes away, as command-line tools do, instead of failing to print.
    restore_sigpipe();
    let arguments = Arguments::parse();
    if let Some(user) = arguments.user {
        let password = match arguments.password {
            Some(password) => password,
            None => match login::read_password(&format!("Password for {user}: ")) {
                Ok(password) => password,
                Err(error) => {
                    eprintln!("{error}");
                    return ExitCode::FAILURE;
                }
            },
        };
        login::set(user, password);
    }
    let tls = tls::Options {
        enable: arguments.tls_enable,
        name: arguments.tls_name,
        cafile: arguments.tls_cafile,
        capath: arguments.tls_capath,
        certfile: arguments.tls_certfile,
        keyfile: arguments.tls_keyfile,
    };
    if let Err(error) = tls::set(&tls) {
        eprintln!("{error}");
        return ExitCode::FAILURE;
    }
    let target = Target {
        host: arguments.host,
        port: arguments.port,
        timeout: Duration::from_millis(arguments.timeout.max(1)),
    };
    let result = match arguments.command {
        Command::Info => admin::info(&target),
        Command::Show { what, filter } => {
            let namespace = match filter.as_slice() {
                [] => Ok(None),
                [keyword, name] if keyword.eq_ignore_ascii_case("namespace") => {
                    Ok(Some(name.as_str()))
                }
                _ => Err(format!(
                    "expected 'namespace NS' after show, got '{}'",
                    filter.join(" ")
                )),
            };
            let what = match what {
                ShowWhat::Statistics => admin::Show::Statistics,
                ShowWhat::Config => admin::Show::Config,
                ShowWhat::Latencies => admin::Show::Latencies,
            };
            namespace.and_then(|namespace| admin::show(&target, what, namespace))
        }
        Command::Asinfo { command, lines } => admin::asinfo(&target, &command, lines),
        Command::Sql {
            command,
            output,
            progress,
        } => {
            let format = match output {
                OutputFormat::Table => sql::parse::Format::Table,
                OutputFormat::Json => sql::parse::Format::Json,
            };
            sql::run(&target, command.as_deref(), format, progress)
        }
        Command::Backup(arguments) => backup::backup(&target, *arguments),
        Command::Restore(arguments) => backup::restore(&target, arguments),
        Command::Acl { command } => acl::run(&target, command),
        Command::Roster { command } => roster::run(&target, command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
