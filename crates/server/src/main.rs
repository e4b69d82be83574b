//! `bolided`: starts a Bolide node.
//!
//! With no arguments it serves namespace `test` in memory on
//! 127.0.0.1:3000. `--config FILE` reads an aerospike.conf-style file.

use bolide_server::config::Config;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bolided",
    version,
    about = "Bolide key-value database node (Aerospike wire protocol)"
)]
struct Arguments {
    /// aerospike.conf-style configuration file; without it, namespace
    /// `test` in memory on 127.0.0.1:3000.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    let config = match &arguments.config {
        None => Config::default(),
        Some(path) => match std::fs::read_to_string(path) {
            Err(error) => {
                eprintln!(
                    "bolided: cannot read config file {}: {error}",
                    path.display()
                );
                return ExitCode::from(2);
            }
            Ok(text) => match Config::parse(&text) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("bolided: {}: {error}", path.display());
                    return ExitCode::from(2);
                }
            },
        },
    };
    init_logging(&config);
    match bolide_server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            eprintln!("bolided: {error}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match &config.log_file {
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(file) => builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .init(),
            Err(error) => {
                eprintln!(
                    "bolided: cannot open log file {}: {error}; logging to stderr",
                    path.display()
                );
                builder.with_writer(std::io::stderr).init();
            }
        },
        None => {
            // Colours only on a terminal: logs redirected to files stay plain.
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .init()
        }
    }
}
