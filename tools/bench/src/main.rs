//! bolide-bench: one load generator that drives Bolide (or any Aerospike
//! server) over the Aerospike protocol and Redis over RESP with the same
//! workload engine, and reports latency without coordinated omission.
//!
//! Talks to servers through `bolide-wire` (encoding) and `bolide-types`
//! (digests, result codes) only. Layout: `config` (flags), `workload`
//! (operation and key choice), `codec` + `aerospike` + `redis` (bytes),
//! `engine` (connections, pacing, reporter), `stats` (histograms, report
//! lines), `summary` (JSON).
#![forbid(unsafe_code)]

mod aerospike;
mod cluster;
mod codec;
mod config;
mod engine;
mod login;
mod redis;
mod stats;
mod summary;
mod tls;
mod workload;

use config::{ArgsError, Config};
use std::io::Write as _;
use std::process::ExitCode;

/// Exit code for a run that could not be done (server, namespace, IO).
const EXIT_RUN_FAILED: u8 = 1;
/// Exit code for bad flags (as clap uses).
const EXIT_BAD_FLAGS: u8 = 2;

fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args_os()) {
        Ok(config) => config,
        Err(ArgsError::Exit(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(ArgsError::Bad(line)) => {
            eprintln!("bolide-bench: {line}");
            return ExitCode::from(EXIT_BAD_FLAGS);
        }
    };
    if let Some(credentials) = &config.credentials {
        let _ = login::CREDENTIALS.set(credentials.clone());
    }
    match run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(line) => {
            eprintln!("bolide-bench: {line}");
            ExitCode::from(EXIT_RUN_FAILED)
        }
    }
}

fn run(config: &Config) -> Result<(), String> {
    let json_to_stdout = config.json.as_deref() == Some("-");
    let progress: Box<dyn std::io::Write + Send> = if json_to_stdout {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let report = engine::run(config, progress)?;
    let text = stats::summary_text(
        &report.stats,
        report.elapsed_seconds,
        config.latency_columns,
    );
    let headline = format!(
        "{} ops in {:.1} s: {:.0} tps, {} errors, {} timeouts",
        report.stats.total_count(),
        report.elapsed_seconds,
        report.stats.total_count() as f64 / report.elapsed_seconds.max(1e-9),
        report.stats.total_errors(),
        report.stats.total_timeouts()
    );
    let error_line = report
        .first_error_text
        .as_deref()
        .map(|text| format!("first error from the server: {text}\n"))
        .unwrap_or_default();
    if json_to_stdout {
        eprint!("{text}{error_line}");
        eprintln!("{headline}");
    } else {
        print!("{text}{error_line}");
        println!("{headline}");
    }
    let Some(target) = &config.json else {
        return Ok(());
    };
    let summary = summary::Summary::of(config, report);
    let json =
        serde_json::to_string_pretty(&summary).map_err(|e| format!("cannot write JSON: {e}"))?;
    if json_to_stdout {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{json}").map_err(|e| format!("cannot write JSON to stdout: {e}"))?;
    } else {
        std::fs::write(target, format!("{json}\n"))
            .map_err(|e| format!("cannot write {target}: {e}"))?;
    }
    Ok(())
}
