//! Runs bench/compare.sh end to end with tiny settings (one short workload,
//! the redis-benchmark tool check, no plots) and checks it writes a results
//! table with a clean row for each server. Needs what the smoke test needs
//! (bolided, redis-server) plus redis-benchmark (same Debian package set),
//! taskset and python3.

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn compare_script_writes_a_table_for_both_servers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bolided = std::env::var_os("BOLIDED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/release/bolided"));
    assert!(
        bolided.is_file(),
        "bolided not found at {}: run `cargo build --release -p bolide-server` or set BOLIDED_BIN",
        bolided.display()
    );
    let results = std::env::temp_dir().join(format!("bolide-compare-test-{}", std::process::id()));
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let server_cpu = if cpus > 1 { "1" } else { "0" };
    let output = Command::new("bash")
        .arg(root.join("bench/compare.sh"))
        .env("SKIP_BUILD", "1")
        .env("BOLIDED_BIN", &bolided)
        .env("BOLIDE_BENCH_BIN", env!("CARGO_BIN_EXE_bolide-bench"))
        .env("RESULTS_DIR", &results)
        .env("KEYS", "1000")
        .env("SECONDS_PER_RUN", "1")
        .env("WORKLOADS", "RU,80")
        .env("CONCURRENCY", "4")
        .env("PLOTS", "0")
        .env("TOOL_CHECK", "1")
        .env("TOOL_CHECK_REQUESTS", "2000")
        .env("SERVER_CPU", server_cpu)
        .env("CLIENT_CPU", "0")
        .output()
        .expect("run bench/compare.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "compare.sh failed:\n{stdout}\n{stderr}"
    );
    let table = std::fs::read_to_string(results.join("results.md")).expect("results.md written");
    let _ = std::fs::remove_dir_all(&results);
    for server in ["bolide", "redis"] {
        for workload in ["I", "RU,80"] {
            let row = table
                .lines()
                .find(|line| line.starts_with(&format!("| {workload} | {server} |")))
                .unwrap_or_else(|| panic!("no row for {server} {workload} in:\n{table}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // | workload | server | ops/s | p50 | p90 | p99 | p99.9 | max | errors | timeouts | cpu |
            let tps: f64 = cells[3].parse().expect("ops/s is a number");
            assert!(tps > 0.0, "no throughput: {row}");
            assert_eq!(cells[9], "0", "errors: {row}");
            assert_eq!(cells[10], "0", "timeouts: {row}");
        }
    }
    for tool in [
        "redis-benchmark SET",
        "bolide-bench SET",
        "redis-benchmark GET",
        "bolide-bench GET",
    ] {
        let row = table
            .lines()
            .find(|line| line.starts_with(&format!("| {tool} |")))
            .unwrap_or_else(|| panic!("no tool check row for {tool} in:\n{table}"));
        let rate: f64 = row
            .split('|')
            .nth(2)
            .map(str::trim)
            .and_then(|r| r.parse().ok())
            .expect("rate");
        assert!(rate > 0.0, "{row}");
    }
}
