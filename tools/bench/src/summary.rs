//! The JSON summary written at the end of a run (`--json FILE` or `--json -`).

use crate::config::{BinSpec, Config, Limit, Protocol};
use crate::engine::RunReport;
use crate::stats::{IntervalSummary, KindSummary, TotalSummary};
use serde::Serialize;
use std::collections::BTreeMap;

/// Everything a comparison script needs from one run.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub tool: &'static str,
    pub protocol: Protocol,
    pub server: String,
    pub namespace: String,
    pub set: String,
    pub workload: String,
    pub object_spec: Vec<String>,
    pub key_count: u64,
    pub concurrency: usize,
    pub depth: usize,
    pub threads: usize,
    pub target_tps: Option<u64>,
    pub limit: String,
    pub elapsed_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error_text: Option<String>,
    pub total: TotalSummary,
    pub operations: BTreeMap<&'static str, KindSummary>,
    /// What the negative error codes in `error_codes` mean.
    pub error_code_notes: BTreeMap<&'static str, &'static str>,
    pub timeline: Vec<IntervalSummary>,
}

impl Summary {
    pub fn of(config: &Config, report: RunReport) -> Summary {
        let seconds = report.elapsed_seconds;
        let operations = report
            .stats
            .active_kinds()
            .map(|(kind, stats)| (kind.name(), KindSummary::of(stats, seconds)))
            .collect();
        Summary {
            tool: "bolide-bench",
            protocol: config.protocol,
            server: format!("{}:{}", config.host, config.port),
            namespace: config.namespace.clone(),
            set: config.set.clone(),
            workload: config.workload_text.clone(),
            object_spec: config.bins.iter().map(spec_text).collect(),
            key_count: config.key_count,
            concurrency: config.concurrency,
            depth: config.depth,
            threads: config.threads,
            target_tps: config.target_tps,
            limit: match config.limit {
                Limit::Duration(duration) => format!("{}s", duration.as_secs_f64()),
                Limit::Operations(count) => format!("{count}ops"),
                Limit::Unbounded => "until done".to_string(),
            },
            elapsed_seconds: (seconds * 1000.0).round() / 1000.0,
            first_error_text: report.first_error_text,
            total: TotalSummary::of(&report.stats, seconds),
            operations,
            error_code_notes: BTreeMap::from([
                ("-1", "Redis error reply"),
                ("-2", "connection broke or could not be used"),
                ("other", "Aerospike result code"),
            ]),
            timeline: report.timeline,
        }
    }
}

fn spec_text(spec: &BinSpec) -> String {
    match spec {
        BinSpec::Integer => "I".to_string(),
        BinSpec::String { bytes } => format!("S:{bytes}"),
        BinSpec::Blob { bytes } => format!("B:{bytes}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Outcome, Stats};
    use crate::workload::OpKind;

    #[test]
    fn summary_serializes_totals_per_kind() {
        let config = Config::from_args(["bolide-bench", "-w", "RU,80", "-o", "S:10", "-d", "2s"])
            .unwrap_or_else(|_| panic!("valid flags"));
        let mut stats = Stats::default();
        for _ in 0..8 {
            stats.record(OpKind::Read, Outcome::Ok, 100);
        }
        stats.record(OpKind::Update, Outcome::Ok, 200);
        stats.record(OpKind::Update, Outcome::Error { code: -2 }, 300);
        let report = RunReport {
            first_error_text: None,
            stats,
            elapsed_seconds: 2.0,
            timeline: Vec::new(),
        };
        let json = serde_json::to_value(Summary::of(&config, report)).expect("serializes");
        assert_eq!(json["protocol"], "aerospike");
        assert_eq!(json["total"]["count"], 10);
        assert_eq!(json["total"]["tps"], 5.0);
        assert_eq!(json["total"]["errors"], 1);
        assert_eq!(json["operations"]["read"]["count"], 8);
        assert_eq!(json["operations"]["update"]["error_codes"]["-2"], 1);
        assert_eq!(
            json["operations"]["read"]["latency_microseconds"]["p99"],
            100
        );
        assert_eq!(json["object_spec"][0], "S:10");
        assert_eq!(json["limit"], "2s");
    }
}
