//! `bolide-sim [SEED | FIRST..LAST | --seeds FIRST..LAST] [--faults N]
//! [--sc] [--racks] [--roster-changes] [--verbose]`: runs one seed (printing its trace with --verbose) or a
//! range of seeds, and exits non-zero at the first failure, printing the
//! command that replays it.

use bolide_sim::{run, Options};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut seeds = 0..200u64;
    let mut faults = 4usize;
    let mut verbose = false;
    let mut sc = false;
    let mut racks = false;
    let mut roster_changes = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--verbose" | "-v" => verbose = true,
            "--sc" => sc = true,
            "--racks" => racks = true,
            "--roster-changes" => roster_changes = true,
            "--seeds" => match args.next().and_then(|range| parse_range(&range)) {
                Some(range) => seeds = range,
                None => return usage("--seeds needs FIRST..LAST"),
            },
            "--faults" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => faults = n,
                None => return usage("--faults needs a number"),
            },
            range if range.contains("..") => match parse_range(range) {
                Some(range) => seeds = range,
                None => return usage("a range is FIRST..LAST"),
            },
            seed => match seed.parse::<u64>() {
                Ok(seed) => seeds = seed..seed + 1,
                Err(_) => return usage(&format!("unknown argument {seed}")),
            },
        }
    }
    let started = Instant::now();
    let count = seeds.end - seeds.start;
    let mut totals = (0u64, 0u64, 0u64);
    let first = seeds.start;
    for seed in seeds {
        let options = Options {
            seed,
            faults,
            verbose,
            sc,
            racks,
            roster_changes,
        };
        match run(&options) {
            Ok(outcome) => {
                totals.0 += outcome.acknowledged_writes;
                totals.1 += outcome.migrations;
                totals.2 += outcome.events;
                if verbose || count == 1 {
                    println!("{outcome}");
                }
                let done = seed - first + 1;
                if count > 1 && done % 50 == 0 {
                    eprintln!(
                        "{done} of {count} seeds passed ({:.0} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Err(failure) => {
                println!("{failure}");
                let sc = if sc { " --sc" } else { "" };
                let racks = if racks { " --racks" } else { "" };
                let roster = if roster_changes {
                    " --roster-changes"
                } else {
                    ""
                };
                println!("replay: cargo run --release -p bolide-sim -- {seed} --faults {faults}{sc}{racks}{roster} --verbose");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{count} seeds passed in {:.1} s: {} acknowledged writes checked, {} migrations, {} events",
        started.elapsed().as_secs_f64(),
        totals.0,
        totals.1,
        totals.2
    );
    ExitCode::SUCCESS
}

/// `FIRST..LAST` (LAST excluded).
fn parse_range(range: &str) -> Option<std::ops::Range<u64>> {
    let (first, last) = range.split_once("..")?;
    let (first, last) = (first.parse().ok()?, last.parse().ok()?);
    (first < last).then_some(first..last)
}

fn usage(problem: &str) -> ExitCode {
    eprintln!(
        "bolide-sim: {problem}\nusage: bolide-sim [SEED | FIRST..LAST | --seeds FIRST..LAST] [--faults N] [--sc] [--racks] [--roster-changes] [--verbose]"
    );
    ExitCode::from(2)
}
