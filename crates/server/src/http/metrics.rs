//! `/metrics`: the node's statistics in the Prometheus text format.
//!
//! Everything here is read from the answers of the info commands
//! (`statistics`, `namespace/<ns>`, `sets`, `latency-histograms`), the same
//! text `asinfo` shows, so a figure added to an info answer appears here
//! too: a number under a name this file does not know becomes a gauge
//! named after it (`bolide_node_<key>`, `bolide_namespace_<key>{ns}`); the
//! table below gives known names their type, unit and help.

use super::InfoAnswers;
use crate::latency::{bucket_upper_seconds, BUCKETS};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use std::collections::BTreeMap;

/// How a known statistic is exported.
struct Known {
    key: &'static str,
    /// Metric name after the scope prefix (`bolide_node_`, …).
    name: &'static str,
    kind: MetricType,
    /// Multiplier to the metric's unit (milliseconds → seconds: 0.001).
    scale: f64,
    help: &'static str,
}

const fn known(
    key: &'static str,
    name: &'static str,
    kind: MetricType,
    scale: f64,
    help: &'static str,
) -> Known {
    Known {
        key,
        name,
        kind,
        scale,
        help,
    }
}

use MetricType::{COUNTER, GAUGE};

/// Node statistics (`statistics`).
#[rustfmt::skip]
const NODE: &[Known] = &[
    known("uptime", "uptime_seconds", GAUGE, 1.0, "Seconds since the node started."),
    known("objects", "objects", GAUGE, 1.0, "Records on this node, all namespaces."),
    known("client_connections", "client_connections", GAUGE, 1.0, "Client connections open now."),
    known("client_connections_opened", "client_connections_opened_total", COUNTER, 1.0, "Client connections accepted."),
    known("client_connections_closed", "client_connections_closed_total", COUNTER, 1.0, "Client connections closed."),
    known("client_connections_refused", "client_connections_refused_total", COUNTER, 1.0, "Connections refused at proto-fd-max."),
    known("tls_handshake_failures", "tls_handshake_failures_total", COUNTER, 1.0, "TLS handshakes that failed on a TLS listener (a plain client, a bad certificate, a timeout)."),
    known("tls_connections", "tls_connections", GAUGE, 1.0, "Client connections over TLS open now."),
    known("tls_connections_opened", "tls_connections_opened_total", COUNTER, 1.0, "Client connections whose TLS handshake succeeded."),
    known("tls_certificate_reloads", "tls_certificate_reloads_total", COUNTER, 1.0, "Times changed TLS certificates, keys, CAs or blacklists were loaded (tls-refresh-period)."),
    known("tls_certificate_reload_failures", "tls_certificate_reload_failures_total", COUNTER, 1.0, "TLS files that could not be read again (the context in force stays)."),
    known("info_requests", "info_requests_total", COUNTER, 1.0, "Info protocol requests answered."),
    known("admin_requests", "admin_requests_total", COUNTER, 1.0, "Admin (security) requests answered."),
    known("bad_frames", "bad_frames_total", COUNTER, 1.0, "Connections closed for a malformed frame."),
    known("proto_buffer_budget_bytes", "proto_buffer_budget_bytes", GAUGE, 1.0, "Budget for connection buffers (proto-buffer-budget)."),
    known("proto_buffer_used_bytes", "proto_buffer_used_bytes", GAUGE, 1.0, "Connection buffer bytes charged to the budget now."),
    known("proto_buffer_waits", "proto_buffer_waits_total", COUNTER, 1.0, "Times a connection waited for room in the buffer budget."),
    known("proto_buffer_closed", "proto_buffer_closed_total", COUNTER, 1.0, "Connections closed to make room in the buffer budget."),
    known("process_rss_bytes", "process_rss_bytes", GAUGE, 1.0, "Resident memory of the bolided process."),
    known("system_total_memory_bytes", "system_total_memory_bytes", GAUGE, 1.0, "Memory of the machine."),
    known("system_free_mem_pct", "system_free_memory_percent", GAUGE, 1.0, "Share of the machine's memory available."),
    known("service_threads", "service_threads", GAUGE, 1.0, "Event loops serving clients."),
    known("cluster_size", "cluster_size", GAUGE, 1.0, "Nodes in the cluster this node belongs to."),
    known("cluster_integrity", "cluster_integrity", GAUGE, 1.0, "1 when the cluster is whole."),
    known("cluster_is_member", "cluster_is_member", GAUGE, 1.0, "1 when this node is a member of a cluster."),
    known("migrate_allowed", "migrate_allowed", GAUGE, 1.0, "1 when migrations may run."),
    known("migrate_partitions_remaining", "migrate_partitions_remaining", GAUGE, 1.0, "Partitions still to migrate."),
    known("cluster_clock_skew_ms", "cluster_clock_skew_milliseconds", GAUGE, 1.0, "Clock skew between members, as their heartbeats show it."),
    known("cluster_clock_skew_stop_writes_sec", "cluster_clock_skew_stop_writes_seconds", GAUGE, 1.0, "Skew at which writes stop (strong consistency: 20 s at the default heartbeat; AP with nsup: 40 s; 0: never)."),
    known("cluster_min_compatibility_id", "cluster_min_compatibility_id", GAUGE, 1.0, "Lowest clustering protocol among members."),
    known("cluster_max_compatibility_id", "cluster_max_compatibility_id", GAUGE, 1.0, "Highest clustering protocol among members."),
    known("cluster_generation", "cluster_generation", GAUGE, 1.0, "Clusters this node committed to since it started."),
    known("time_since_rebalance", "time_since_rebalance_seconds", GAUGE, 1.0, "Seconds since the last rebalance."),
    known("rebalance_generation", "rebalance_generation", GAUGE, 1.0, "Rebalances since the node started."),
    known("heartbeat_received_self", "heartbeat_received_self_total", COUNTER, 1.0, "Heartbeat pulses received from this node itself."),
    known("heartbeat_received_foreign", "heartbeat_received_foreign_total", COUNTER, 1.0, "Heartbeat pulses received from other nodes."),
    known("heartbeat_nodes", "heartbeat_nodes", GAUGE, 1.0, "Other nodes heard on the heartbeat now."),
    known("heartbeat_connections_opened", "heartbeat_connections_opened_total", COUNTER, 1.0, "Heartbeat connections opened."),
    known("heartbeat_connections_closed", "heartbeat_connections_closed_total", COUNTER, 1.0, "Heartbeat connections closed."),
    known("heartbeat_bad_frames", "heartbeat_bad_frames_total", COUNTER, 1.0, "Heartbeat connections dropped for an invalid, stalled or oversized frame."),
    known("heartbeat_buffered_bytes", "heartbeat_buffered_bytes", GAUGE, 1.0, "Bytes of unfinished heartbeat frames held above each connection's free 64 KiB (at most 32 MiB)."),
    known("heartbeat_tls_handshake_failures", "heartbeat_tls_handshake_failures_total", COUNTER, 1.0, "TLS handshakes on heartbeat connections that failed (a peer without a certificate from the cluster's CA or with another name)."),
    known("fabric_connections_opened", "fabric_connections_opened_total", COUNTER, 1.0, "Fabric connections opened."),
    known("fabric_connections_closed", "fabric_connections_closed_total", COUNTER, 1.0, "Fabric connections closed."),
    known("fabric_bad_frames", "fabric_bad_frames_total", COUNTER, 1.0, "Fabric connections dropped for an invalid frame, a HELLO from outside the cluster or none in time."),
    known("fabric_tls_handshake_failures", "fabric_tls_handshake_failures_total", COUNTER, 1.0, "TLS handshakes on fabric and migration connections that failed (a peer without a certificate from the cluster's CA or with another name)."),
    known("proxy_in_progress", "proxy_in_progress", GAUGE, 1.0, "Requests being proxied to other nodes now."),
    known("client_proxy_complete", "client_proxy_complete_total", COUNTER, 1.0, "Requests proxied to the node that serves them and answered."),
    known("client_proxy_error", "client_proxy_error_total", COUNTER, 1.0, "Proxy attempts that found no connection."),
    known("client_proxy_timeout", "client_proxy_timeout_total", COUNTER, 1.0, "Proxied requests that timed out."),
    known("from_proxy_complete", "from_proxy_complete_total", COUNTER, 1.0, "Requests other nodes proxied here, served."),
    known("from_proxy_redirect", "from_proxy_redirect_total", COUNTER, 1.0, "Requests proxied here and sent back to the node that serves them."),
    known("replica_writes_sent", "replica_writes_sent_total", COUNTER, 1.0, "Copies of writes sent to other holders."),
    known("replica_writes_received", "replica_writes_received_total", COUNTER, 1.0, "Copies of writes received."),
    known("replica_writes_refused", "replica_writes_refused_total", COUNTER, 1.0, "Copies of writes refused (another cluster key)."),
    known("replica_write_timeouts", "replica_write_timeouts_total", COUNTER, 1.0, "Writes whose copies were not acknowledged in time."),
    known("dup_res_fetches", "dup_res_fetches_total", COUNTER, 1.0, "Copies fetched to resolve a write against copies not merged yet."),
    known("migrate_records_transmitted", "migrate_records_transmitted_total", COUNTER, 1.0, "Records sent by migrations."),
    known("migrate_record_receives", "migrate_record_receives_total", COUNTER, 1.0, "Records received by migrations."),
    known("migrate_records_applied", "migrate_records_applied_total", COUNTER, 1.0, "Migrated records newer than the copy held, applied."),
    known("migrate_records_skipped", "migrate_records_skipped_total", COUNTER, 1.0, "Records a migration could not read back, skipped."),
    known("migrate_partitions_sent", "migrate_partitions_sent_total", COUNTER, 1.0, "Partitions sent by migrations."),
    known("migrate_partitions_received", "migrate_partitions_received_total", COUNTER, 1.0, "Partitions received by migrations."),
    known("tombstones_raided", "tombstones_raided_total", COUNTER, 1.0, "Tombstones forgotten past tomb-raider-eligible-age."),
];

/// Namespace statistics (`namespace/<ns>`), labelled `ns`.
#[rustfmt::skip]
const NAMESPACE: &[Known] = &[
    known("objects", "objects", GAUGE, 1.0, "Records in the namespace."),
    known("master_objects", "master_objects", GAUGE, 1.0, "Records this node is master of."),
    known("prole_objects", "prole_objects", GAUGE, 1.0, "Replica records on this node."),
    known("non_replica_objects", "non_replica_objects", GAUGE, 1.0, "Records neither master nor replica here."),
    known("tombstones", "tombstones", GAUGE, 1.0, "Tombstones in the index."),
    known("ns_cluster_size", "cluster_size", GAUGE, 1.0, "Nodes serving the namespace."),
    known("effective_replication_factor", "effective_replication_factor", GAUGE, 1.0, "Copies kept of each record."),
    known("master_tombstones", "master_tombstones", GAUGE, 1.0, "Tombstones in partitions this node is master of."),
    known("prole_tombstones", "prole_tombstones", GAUGE, 1.0, "Tombstones in partitions this node is a replica of."),
    known("unavailable_partitions", "unavailable_partitions", GAUGE, 1.0, "Partitions nobody serves here (before the first map, or an orphan past its grace)."),
    known("dead_partitions", "dead_partitions", GAUGE, 1.0, "(SC) Partitions unavailable with every roster node present: no copy holds every acknowledged write; revive: then recluster: serves what is left (always 0 in AP)."),
    known("clock_skew_stop_writes", "clock_skew_stop_writes", GAUGE, 1.0, "1 while the cluster's clock skew is past the namespace's limit: writes answer 22."),
    known("unreplicated_records", "unreplicated_records", GAUGE, 1.0, "(SC) Records written here whose copies are not all acknowledged yet: copied again before they are next served."),
    known("auto_revived_partitions", "auto_revived_partitions", GAUGE, 1.0, "(SC) Partitions whose untrusted copies auto-revive revived at this node's start."),
    known("migrate_tx_partitions_initial", "migrate_tx_partitions_initial", GAUGE, 1.0, "Partitions this node was to send at the last rebalance."),
    known("migrate_tx_partitions_remaining", "migrate_tx_partitions_remaining", GAUGE, 1.0, "Partitions this node still has to send."),
    known("migrate_rx_partitions_initial", "migrate_rx_partitions_initial", GAUGE, 1.0, "Partitions this node was to receive at the last rebalance."),
    known("migrate_rx_partitions_remaining", "migrate_rx_partitions_remaining", GAUGE, 1.0, "Partitions this node still has to receive."),
    known("migrate_signals_remaining", "migrate_signals_remaining", GAUGE, 1.0, "Drop signals still to send or receive."),
    known("migrate_fresh_partitions", "migrate_fresh_partitions", GAUGE, 1.0, "Partitions no node had data for at the last rebalance."),
    known("tomb-raider-eligible-age", "config_tomb_raider_eligible_age_seconds", GAUGE, 1.0, "Configured tomb-raider-eligible-age."),
    known("migrate-sleep", "config_migrate_sleep_microseconds", GAUGE, 1.0, "Configured migrate-sleep."),
    known("rack-id", "config_rack_id", GAUGE, 1.0, "This node's rack-id for the namespace (0: none; set-config changes it, placed by at the next rebalance)."),
    known("effective_active_rack", "effective_active_rack", GAUGE, 1.0, "(SC) The roster's active rack, which masters every partition (0: none)."),
    known("memory_used_bytes", "memory_used_bytes", GAUGE, 1.0, "Index and record memory used."),
    known("index_used_bytes", "index_used_bytes", GAUGE, 1.0, "Primary index memory used."),
    known("data_used_bytes", "data_used_bytes", GAUGE, 1.0, "Record data memory used."),
    known("data_total_bytes", "data_total_bytes", GAUGE, 1.0, "The namespace's memory budget (data-size)."),
    known("memory_free_pct", "memory_free_percent", GAUGE, 1.0, "Share of data-size still free."),
    known("data_used_pct", "data_used_percent", GAUGE, 1.0, "Share of data-size used (compare with stop-writes-used-pct)."),
    known("stop_writes", "stop_writes", GAUGE, 1.0, "1 while writes are refused (out of space)."),
    known("hwm_breached", "hwm_breached", GAUGE, 1.0, "1 while above the eviction mark (evict-used-pct)."),
    known("expired_objects", "expired_objects_total", COUNTER, 1.0, "Records removed because their TTL ran out."),
    known("evicted_objects", "evicted_objects_total", COUNTER, 1.0, "Records evicted above evict-used-pct."),
    known("nsup_cycle_duration", "nsup_cycle_duration_seconds", GAUGE, 0.001, "Duration of the last expiry/eviction sweep."),
    known("nsup_cycles", "nsup_cycles_total", COUNTER, 1.0, "Expiry/eviction sweeps run."),
    known("client_read_success", "client_read_success_total", COUNTER, 1.0, "Reads answered with a record."),
    known("client_read_not_found", "client_read_not_found_total", COUNTER, 1.0, "Reads of a missing record."),
    known("client_read_error", "client_read_error_total", COUNTER, 1.0, "Reads answered with an error."),
    known("client_write_success", "client_write_success_total", COUNTER, 1.0, "Writes applied."),
    known("client_write_error", "client_write_error_total", COUNTER, 1.0, "Writes answered with an error."),
    known("client_delete_success", "client_delete_success_total", COUNTER, 1.0, "Deletes applied."),
    known("client_delete_not_found", "client_delete_not_found_total", COUNTER, 1.0, "Deletes of a missing record."),
    known("client_delete_error", "client_delete_error_total", COUNTER, 1.0, "Deletes answered with an error."),
    known("fail_generation", "fail_generation_total", COUNTER, 1.0, "Writes refused by a generation check."),
    known("fail_record_too_big", "fail_record_too_big_total", COUNTER, 1.0, "Writes refused as larger than max-record-size."),
    known("fail_out_of_space", "fail_out_of_space_total", COUNTER, 1.0, "Writes refused at stop-writes."),
    known("device_total_bytes", "device_total_bytes", GAUGE, 1.0, "Size of the storage files."),
    known("device_used_bytes", "device_used_bytes", GAUGE, 1.0, "Live record bytes on the storage files."),
    known("device_used_pct", "device_used_percent", GAUGE, 1.0, "Share of the storage used by live records."),
    known("device_free_pct", "device_free_percent", GAUGE, 1.0, "Share of the storage not used by live records."),
    known("device_available_pct", "device_available_percent", GAUGE, 1.0, "Share of the storage in free write blocks."),
    known("device_free_blocks", "device_free_blocks", GAUGE, 1.0, "Free write blocks."),
    known("device_total_blocks", "device_total_blocks", GAUGE, 1.0, "Write blocks of the storage files."),
    known("storage-engine.write_q", "storage_write_queue_blocks", GAUGE, 1.0, "Full write blocks not yet on the device."),
    known("storage-engine.defrag_q", "storage_defrag_queue_blocks", GAUGE, 1.0, "Write blocks below the defrag mark."),
    known("storage-engine.defrag_blocks", "storage_defrag_blocks_total", COUNTER, 1.0, "Write blocks emptied by defragmentation."),
    known("storage-engine.defrag_reads", "storage_defrag_reads_total", COUNTER, 1.0, "Write blocks read by defragmentation."),
    known("storage-engine.defrag_writes", "storage_defrag_writes_total", COUNTER, 1.0, "Records moved by defragmentation."),
    known("storage-engine.blocks_written", "storage_blocks_written_total", COUNTER, 1.0, "Full write blocks written."),
    known("storage-engine.partial_flushes", "storage_partial_flushes_total", COUNTER, 1.0, "Open blocks flushed by flush-max-ms."),
    known("storage-engine.syncs", "storage_syncs_total", COUNTER, 1.0, "fdatasync calls of the flusher."),
    known("storage-engine.tombstones_dropped", "storage_tombstones_dropped_total", COUNTER, 1.0, "Tombstones dropped by defragmentation."),
    known("storage-engine.write_errors", "storage_write_errors_total", COUNTER, 1.0, "Failed device writes or syncs (retried)."),
    known("storage-engine.write_failing", "storage_write_failing", GAUGE, 1.0, "1 while the flusher retries a failed write."),
    known("data_compression_ratio", "data_compression_ratio", GAUGE, 1.0, "Stored size over uncompressed size of recently written records (1: not compressing)."),
    known("storage-engine.compressed_records", "storage_compressed_records_total", COUNTER, 1.0, "Records written compressed."),
    known("storage-engine.uncompressible_records", "storage_uncompressible_records_total", COUNTER, 1.0, "Records stored plain although compression is on (they did not shrink)."),
    known("storage-engine.compression-level", "config_storage_compression_level", GAUGE, 1.0, "zstd level in effect (compression-level)."),
    known("storage-engine.compression-acceleration", "config_storage_compression_acceleration", GAUGE, 1.0, "lz4 acceleration in effect (compression-acceleration)."),
    known("cold_start_ms", "cold_start_seconds", GAUGE, 0.001, "Duration of the last cold start."),
    known("cold_start_records", "cold_start_records", GAUGE, 1.0, "Records loaded by the last cold start."),
    known("cold_start_blocks", "cold_start_blocks", GAUGE, 1.0, "Write blocks read by the last cold start."),
    known("cold_start_damaged_entries", "cold_start_damaged_entries", GAUGE, 1.0, "Damaged entries skipped by the last cold start."),
    known("cold_start_bad_blocks", "cold_start_bad_blocks", GAUGE, 1.0, "Damaged blocks skipped by the last cold start."),
    known("default-ttl", "config_default_ttl_seconds", GAUGE, 1.0, "Configured default-ttl."),
    known("replication-factor", "config_replication_factor", GAUGE, 1.0, "Configured replication-factor."),
    known("data-size", "config_data_size_bytes", GAUGE, 1.0, "Configured data-size."),
    known("stop-writes-used-pct", "config_stop_writes_used_percent", GAUGE, 1.0, "Configured stop-writes-used-pct."),
    known("evict-used-pct", "config_evict_used_percent", GAUGE, 1.0, "Configured evict-used-pct (0: off)."),
    known("storage-engine.filesize", "config_storage_file_size_bytes", GAUGE, 1.0, "Configured filesize per storage file."),
    known("storage-engine.min-avail-pct", "config_storage_min_avail_percent", GAUGE, 1.0, "Configured stop-writes-avail-pct."),
];

/// Set statistics (`sets`), labelled `ns` and `set`.
#[rustfmt::skip]
const SET: &[Known] = &[
    known("objects", "objects", GAUGE, 1.0, "Records in the set."),
    known("tombstones", "tombstones", GAUGE, 1.0, "Tombstones of the set."),
    known("data_used_bytes", "data_used_bytes", GAUGE, 1.0, "Record bytes of the set."),
    known("truncate_lut", "truncate_lut_milliseconds", GAUGE, 1.0, "Last truncation point (ms since 2010-01-01)."),
    known("sindexes", "sindexes", GAUGE, 1.0, "Secondary indexes on the set."),
    known("truncating", "truncating", GAUGE, 1.0, "1 while a truncation of the set is being swept."),
    known("index_populating", "index_populating", GAUGE, 1.0, "1 while a secondary index of the set is being built."),
];

/// Keys whose values are names or identifiers, never figures.
fn is_identifier(key: &str) -> bool {
    key.ends_with("_key")
        || key.ends_with("_name")
        || key.ends_with("_principal")
        || key.ends_with("node_id")
        || key.ends_with("-name")
}

/// The whole scrape.
pub fn render(answers: &InfoAnswers) -> String {
    let mut families = Families::default();
    let node_name = answers.get("node").unwrap_or_default();
    families.add(
        "bolide_build_info",
        "The node's name, build and version (always 1).",
        GAUGE,
        &[
            ("node", node_name),
            ("build", answers.get("build").unwrap_or_default()),
            ("version", answers.get("version").unwrap_or_default()),
            (
                "cluster_name",
                answers.get("cluster-name").unwrap_or_default(),
            ),
        ],
        1.0,
    );
    if let Some(statistics) = answers.get("statistics") {
        families.statistics("bolide_node_", NODE, pairs(statistics, ';'), &[]);
        // The cluster's identity is a name, not a figure: a series of its
        // own whose labels say which cluster this node is in. Nodes that
        // answer different keys are in different clusters (a split).
        let field = |name: &str| {
            pairs(statistics, ';')
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value)
        };
        if let Some(cluster_key) = field("cluster_key") {
            families.add(
                "bolide_node_cluster_info",
                "Always 1; labels: the cluster key and principal this node answers (different keys on two nodes: they are in different clusters).",
                GAUGE,
                &[
                    ("cluster_key", cluster_key),
                    ("principal", field("cluster_principal").unwrap_or_default()),
                ],
                1.0,
            );
        }
    }
    for namespace in answers.namespaces() {
        if let Some(text) = answers.get(&format!("namespace/{namespace}")) {
            families.statistics(
                "bolide_namespace_",
                NAMESPACE,
                pairs(text, ';'),
                &[("ns", namespace)],
            );
        }
    }
    if let Some(sets) = answers.get("sets") {
        for line in sets.split(';').filter(|line| !line.is_empty()) {
            let fields: Vec<(&str, &str)> = pairs(line, ':').collect();
            let field = |name: &str| fields.iter().find(|(key, _)| *key == name).map(|(_, v)| *v);
            let (Some(namespace), Some(set)) = (field("ns"), field("set")) else {
                continue;
            };
            families.statistics(
                "bolide_set_",
                SET,
                fields.iter().copied(),
                &[("ns", namespace), ("set", set)],
            );
        }
    }
    if let Some(histograms) = answers.get("latency-histograms") {
        families.latencies(histograms);
    }
    families.encode()
}

/// `k=v` pairs of an info answer split on `separator`.
pub fn pairs(text: &str, separator: char) -> impl Iterator<Item = (&str, &str)> {
    text.split(separator)
        .filter_map(|pair| pair.split_once('='))
}

/// Families by name, in name order (Prometheus wants one block per name).
#[derive(Default)]
struct Families {
    families: BTreeMap<String, MetricFamily>,
}

impl Families {
    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut MetricFamily {
        self.families.entry(name.to_owned()).or_insert_with(|| {
            let mut family = MetricFamily::default();
            family.set_name(name.to_owned());
            family.set_help(help.to_owned());
            family.set_field_type(kind);
            family
        })
    }

    fn add(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let family = self.family(name, help, kind);
        if family.get_field_type() != kind {
            return;
        }
        let mut metric = Metric::default();
        metric.set_label(label_pairs(labels));
        if kind == COUNTER {
            let mut counter = Counter::default();
            counter.set_value(value);
            metric.set_counter(counter);
        } else {
            let mut gauge = Gauge::default();
            gauge.set_value(value);
            metric.set_gauge(gauge);
        }
        family.mut_metric().push(metric);
    }

    /// Exports every number of one info answer under `prefix`.
    fn statistics<'t>(
        &mut self,
        prefix: &str,
        table: &[Known],
        pairs: impl Iterator<Item = (&'t str, &'t str)>,
        labels: &[(&str, &str)],
    ) {
        for (key, value) in pairs {
            let known = table.iter().find(|known| known.key == key);
            let Some(number) = number(value) else {
                continue;
            };
            match known {
                Some(known) => self.add(
                    &format!("{prefix}{}", known.name),
                    known.help,
                    known.kind,
                    labels,
                    number * known.scale,
                ),
                None => {
                    // Configuration (names with '-') only when listed above.
                    let bare = key.strip_prefix("storage-engine.").unwrap_or(key);
                    if bare.contains('-') || is_identifier(key) {
                        continue;
                    }
                    let help = format!("'{key}' of the info answer (not yet described).");
                    self.add(
                        &format!("{prefix}{}", sanitize(key)),
                        &help,
                        GAUGE,
                        labels,
                        number,
                    );
                }
            }
        }
    }

    /// `bolide_latency_seconds{ns, type}` from `latency-histograms`.
    fn latencies(&mut self, text: &str) {
        for entry in text.split(';').filter(|entry| !entry.is_empty()) {
            let Some((name, rest)) = entry.split_once(':') else {
                continue;
            };
            let fields: Vec<(&str, &str)> = pairs(rest, ':').collect();
            let field = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let (Some(count), Some(sum_us), Some(buckets)) = (
                field("count").and_then(|v| v.parse::<u64>().ok()),
                field("sum-us").and_then(|v| v.parse::<u64>().ok()),
                field("buckets"),
            ) else {
                continue;
            };
            let counts: Vec<u64> = buckets.split(',').filter_map(|v| v.parse().ok()).collect();
            if counts.len() != BUCKETS {
                continue;
            }
            let (namespace, kind) = match name.strip_prefix('{').and_then(|n| n.split_once("}-")) {
                Some((namespace, kind)) => (Some(namespace), kind),
                None => (None, name),
            };
            let mut labels = Vec::new();
            if let Some(namespace) = namespace {
                labels.push(("ns", namespace));
            }
            labels.push(("type", kind));
            let mut histogram = Histogram::default();
            histogram.set_sample_count(count);
            histogram.set_sample_sum(sum_us as f64 / 1e6);
            let mut cumulative = 0;
            let mut bounds = Vec::new();
            // The last bucket is +Inf, which the encoder adds from the count.
            for (index, bucket_count) in counts.iter().enumerate().take(BUCKETS - 1) {
                cumulative += bucket_count;
                let mut bucket = Bucket::default();
                bucket.set_upper_bound(bucket_upper_seconds(index));
                bucket.set_cumulative_count(cumulative);
                bounds.push(bucket);
            }
            histogram.set_bucket(bounds);
            let mut metric = Metric::default();
            metric.set_label(label_pairs(&labels));
            metric.set_histogram(histogram);
            self.family(
                "bolide_latency_seconds",
                "Time from a request's arrival to its answer, by namespace and type (read, write, udf, pi-query, si-query; batch-index for whole batches).",
                MetricType::HISTOGRAM,
            )
            .mut_metric()
            .push(metric);
        }
    }

    fn encode(self) -> String {
        let families: Vec<MetricFamily> = self.families.into_values().collect();
        prometheus::TextEncoder::new()
            .encode_to_string(&families)
            .unwrap_or_else(|error| format!("# encoding failed: {error}\n"))
    }
}

fn label_pairs(labels: &[(&str, &str)]) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name((*name).to_owned());
            pair.set_value((*value).to_owned());
            pair
        })
        .collect()
}

/// A figure: a number, or a boolean as 1/0.
fn number(value: &str) -> Option<f64> {
    match value {
        "true" => Some(1.0),
        "false" => Some(0.0),
        _ => value
            .parse::<f64>()
            .ok()
            .filter(|number| number.is_finite()),
    }
}

/// A metric name from an info key: `[a-zA-Z0-9_]`, the rest as `_`.
pub fn sanitize(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(pairs: &[(&str, &str)]) -> InfoAnswers {
        InfoAnswers::from_pairs(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn statistics_become_typed_metrics_and_unknown_numbers_gauges() {
        let text = render(&answers(&[
            ("node", "BB9"),
            ("statistics", "uptime=12;client_connections_opened=5;cluster_key=1234;migrate_records_sent=7;cluster_name=x;weird=abc"),
            ("namespaces", "test"),
            ("namespace/test", "objects=3;stop_writes=false;nsup_cycle_duration=1500;default-ttl=60;nsup-period=120;storage-engine.defrag_q=2"),
            ("sets", "ns=test:set=demo:objects=2:data_used_bytes=99:truncating=false;"),
        ]));
        assert!(
            text.contains(
                "# TYPE bolide_node_uptime_seconds gauge\nbolide_node_uptime_seconds 12\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE bolide_node_client_connections_opened_total counter\nbolide_node_client_connections_opened_total 5\n"));
        assert!(text.contains("bolide_node_migrate_records_sent 7\n"));
        assert!(!text.contains("bolide_node_cluster_key"));
        assert!(
            text.contains("bolide_node_cluster_info{cluster_key=\"1234\",principal=\"\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("weird"));
        assert!(text.contains("bolide_namespace_objects{ns=\"test\"} 3\n"));
        assert!(text.contains("bolide_namespace_stop_writes{ns=\"test\"} 0\n"));
        assert!(text.contains("bolide_namespace_nsup_cycle_duration_seconds{ns=\"test\"} 1.5\n"));
        assert!(text.contains("bolide_namespace_config_default_ttl_seconds{ns=\"test\"} 60\n"));
        assert!(!text.contains("nsup_period"));
        assert!(text.contains("bolide_namespace_storage_defrag_queue_blocks{ns=\"test\"} 2\n"));
        assert!(text.contains("bolide_set_objects{ns=\"test\",set=\"demo\"} 2\n"));
        assert!(text.contains("bolide_set_truncating{ns=\"test\",set=\"demo\"} 0\n"));
        assert!(text.contains("bolide_build_info{node=\"BB9\""));
    }

    #[test]
    fn latency_histograms_become_cumulative_buckets_in_seconds() {
        let buckets = "0,0,0,0,0,0,0,1,0,6,0,1,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0";
        let text = render(&answers(&[(
            "latency-histograms",
            &format!("batch-index:count=0:sum-us=0:buckets={};{{test}}-read:count=9:sum-us=8400:buckets={buckets};", ["0"; 28].join(",")),
        )]));
        assert!(
            text.contains("# TYPE bolide_latency_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "bolide_latency_seconds_bucket{ns=\"test\",type=\"read\",le=\"0.000125\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "bolide_latency_seconds_bucket{ns=\"test\",type=\"read\",le=\"0.0005\"} 7\n"
        ));
        assert!(text
            .contains("bolide_latency_seconds_bucket{ns=\"test\",type=\"read\",le=\"0.002\"} 8\n"));
        assert!(text
            .contains("bolide_latency_seconds_bucket{ns=\"test\",type=\"read\",le=\"+Inf\"} 9\n"));
        assert!(text.contains("bolide_latency_seconds_sum{ns=\"test\",type=\"read\"} 0.0084\n"));
        assert!(text.contains("bolide_latency_seconds_count{ns=\"test\",type=\"read\"} 9\n"));
        assert!(text.contains("bolide_latency_seconds_count{type=\"batch-index\"} 0\n"));
    }
}
