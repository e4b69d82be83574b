//! `bolide`: the operator's command-line tool.
//!
//! asadm-style: `bolide info`, `bolide show statistics|config|latencies
//! [namespace NS]`, `bolide asinfo CMD`; aql-style: `bolide sql` (a prompt
//! with history and line editing) or `bolide sql -c "STATEMENT"`;
//! asbackup/asrestore-style: `bolide backup`, `bolide restore` (`.asb`
//! files, docs/backup.md).
//!
//! It talks to the nodes only through the Aerospike protocol (info requests
//! through Bolide's wire crate, records through the official `aerospike`
//! crate), so it works against Aerospike servers too. Every node is found
//! from one seed (`-h`, `-p`) through `peers-clear-std`.

#![deny(unsafe_code)]

mod admin;
mod backup;
mod info;
mod progress;
mod sql;

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
    Backup(backup::BackupArgs),
    /// Restore .asb files (asrestore's flags; docs/backup.md).
    Restore(backup::RestoreArgs),
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
        Command::Backup(arguments) => backup::backup(&target, arguments),
        Command::Restore(arguments) => backup::restore(&target, arguments),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
