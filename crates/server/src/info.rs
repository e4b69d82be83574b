//! Info commands (proto type 1): what clients send to discover and tend
//! the node, and what tools ask for statistics.

use crate::budget::Budget;
use crate::cluster::{self, ClusterService};
use crate::config::Config;
use crate::counters::NodeCounters;
use crate::latency::Latencies;
use crate::system::{process_rss_bytes, system_memory_bytes};
use bolide_store::Namespace;
use bolide_transaction::{Caller, Permission};
use bolide_types::{
    now_citrusleaf_milliseconds, now_citrusleaf_seconds, CITRUSLEAF_EPOCH_UNIX_SECONDS,
    PARTITION_COUNT,
};
use bolide_wire::info::{append_answer, commands, InfoCommand};
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The protocol version the node reports in `build`. Clients switch
/// features on it; 8.1 selects the current batch, scan and info syntaxes.
pub const PROTOCOL_BUILD: &str = "8.1.0.0";

const FEATURES: &str = "batch-any;batch-index;blob-bits;cdt-index;cdt-list;cdt-map;cluster-stable;float;geo;\
sindex-exists;peers;pipelining;pquery;pscans;query-show;relaxed-sc;replicas;replicas-all;replicas-master;\
replicas-max;truncate-namespace;udf";
/// The edition an open node reports.
const EDITION: &str = "Bolide Community Edition";
/// The edition a secured node reports: the clients' suites and tools
/// switch their access-control features on when `edition` contains
/// "Enterprise" (docs/security.md, "Edition").
const EDITION_SECURED: &str = "Bolide Enterprise Edition (access control)";

/// The commands answered for an empty request (the "summary").
const SUMMARY: &[&str] = &[
    "features",
    "node",
    "compatibility-id",
    "edition",
    "build_ee_sha",
    "build_sha",
    "build_arch",
    "build_time",
    "build_os",
    "build",
    "version",
    "statistics",
    "services-alumni",
    "services",
    "partition-generation",
];

/// What the info commands read and act on: the whole node's figures and
/// configuration, but nothing of its connections.
pub struct Info {
    config: Arc<Config>,
    node_id: u64,
    cluster: Arc<cluster::Context>,
    latencies: Arc<Latencies>,
    budget: Arc<Budget>,
    counters: Arc<NodeCounters>,
    /// A secured node's access control (its statistics, its edition).
    security: Option<Arc<bolide_security::Security>>,
}

impl Info {
    pub fn new(
        config: Arc<Config>,
        node_id: u64,
        cluster: Arc<cluster::Context>,
        latencies: Arc<Latencies>,
        budget: Arc<Budget>,
        counters: Arc<NodeCounters>,
        security: Option<Arc<bolide_security::Security>>,
    ) -> Info {
        Info {
            config,
            node_id,
            cluster,
            latencies,
            budget,
            counters,
            security,
        }
    }

    /// The cluster service (membership, peers, routing).
    pub fn cluster(&self) -> &Arc<cluster::Context> {
        &self.cluster
    }

    /// The edition this node reports.
    pub fn edition(&self) -> &'static str {
        if self.security.is_some() {
            EDITION_SECURED
        } else {
            EDITION
        }
    }

    /// Answers an info request body for `caller`; `local` is the address
    /// the request came in on. A command the caller may not run answers
    /// `ERROR:81:role violation` (the others in the request still run).
    pub fn answer(&self, body: &[u8], local: SocketAddr, caller: &Caller, out: &mut Vec<u8>) {
        if body.is_empty() {
            for name in SUMMARY {
                append_answer(out, name, &value(self, &InfoCommand::parse(name), local));
            }
            return;
        }
        for raw in commands(body) {
            let text = String::from_utf8_lossy(raw);
            let command = InfoCommand::parse(&text);
            let answer = match check(caller, &command) {
                Ok(()) => value(self, &command, local),
                Err((code, permission)) => refusal(code, permission),
            };
            append_answer(out, command.text, &answer);
        }
    }

    /// Node name as clients see it: upper-case hex without leading zeros.
    pub fn name(&self) -> String {
        format!("{:X}", self.node_id)
    }

    /// The namespaces' names, in the configuration's order.
    pub fn namespace_names(&self) -> Vec<String> {
        self.cluster
            .store
            .namespaces()
            .iter()
            .map(|ns| ns.name().to_owned())
            .collect()
    }

    fn service(&self) -> &ClusterService {
        &self.cluster.cluster
    }
}

/// Whether `caller` may run `command`: the commands that change the node
/// or its data need a permission (on the namespace and set they name);
/// the others, which only tell, need none.
fn check(
    caller: &Caller,
    command: &InfoCommand<'_>,
) -> Result<(), (bolide_types::ResultCode, Permission)> {
    let permission = match command.name {
        "truncate" | "truncate-namespace" | "truncate-undo" | "truncate-namespace-undo" => {
            Permission::Truncate
        }
        "sindex-create" | "sindex-delete" | "sindex-exists" => Permission::SindexAdmin,
        "udf-put" | "udf-remove" => Permission::UdfAdmin,
        "query-abort" | "scan-abort" | "query-abort-all" | "scan-abort-all" => {
            Permission::QueryAdmin
        }
        "recluster" | "roster-set" | "revive" | "services-alumni-reset" => Permission::ServiceCtrl,
        "set-config" | "config-set" => Permission::SetConfig,
        _ => return Ok(()),
    };
    // Truncation and index administration are scoped to the namespace
    // (and set) they name; the others are node-wide.
    let scoped = matches!(permission, Permission::Truncate | Permission::SindexAdmin);
    let namespace = command
        .param("namespace")
        .or_else(|| command.param("ns"))
        .filter(|ns| scoped && !ns.is_empty());
    let set = command
        .param("set")
        .filter(|set| scoped && !set.is_empty())
        .map(str::as_bytes);
    caller
        .check_command(permission, namespace, set, command.text)
        .map_err(|code| (code, permission))
}

/// The answer to a refused command, as Aerospike words it:
/// `ERROR:81:role violation - requires permission 'truncate'`.
fn refusal(code: bolide_types::ResultCode, permission: Permission) -> String {
    use bolide_types::ResultCode;
    let number = code.as_u8();
    match code {
        ResultCode::RoleViolation => format!(
            "ERROR:{number}:role violation - requires permission '{}'",
            crate::access::permission_name(permission)
        ),
        ResultCode::NotAuthenticated => format!("ERROR:{number}:not authenticated"),
        ResultCode::QuotaExceeded => format!("ERROR:{number}:quota exceeded"),
        _ => format!("ERROR:{number}:refused"),
    }
}

fn value(node: &Info, command: &InfoCommand<'_>, local: SocketAddr) -> String {
    let config = &node.config;
    let service = service_address(node, local);
    match command.name {
        "node" => node.name(),
        "build" => PROTOCOL_BUILD.to_owned(),
        "version" => format!(
            "{} build {PROTOCOL_BUILD} (bolide {})",
            node.edition(),
            env!("CARGO_PKG_VERSION")
        ),
        "edition" => node.edition().to_owned(),
        "release" => format!(
            "edition={};version={PROTOCOL_BUILD};os={};arch={};sha=bolide-{}",
            node.edition(),
            std::env::consts::OS,
            std::env::consts::ARCH,
            env!("CARGO_PKG_VERSION")
        ),
        "build_os" => std::env::consts::OS.to_owned(),
        "build_arch" => std::env::consts::ARCH.to_owned(),
        "build_sha" => format!("bolide-{}", env!("CARGO_PKG_VERSION")),
        "build_ee_sha" => String::new(),
        "build_time" => "unknown".to_owned(),
        "compatibility-id" => "1".to_owned(),
        "features" => FEATURES.to_owned(),
        "cluster-name" => config.cluster_name.clone(),
        "partition-generation" => cluster::info::partition_generation(&node.cluster),
        "peers-generation" => node.service().status().peers_generation.to_string(),
        "rebalance-generation" => node.service().status().rebalance_generation.to_string(),
        "partitions" => PARTITION_COUNT.to_string(),
        "peers-clear-std" | "peers-clear-alt" | "alumni-clear-std" => {
            cluster::info::peers(&node.cluster)
        }
        "peers-tls-std" | "peers-tls-alt" | "alumni-tls-std" => {
            cluster::info::peers_tls(&node.cluster)
        }
        "service-clear-std" | "service" => service,
        "service-tls-std" => tls_service_address(node, local),
        "service-clear-alt" | "service-tls-alt" => String::new(),
        "services" | "services-alumni" => cluster::info::services(&node.cluster),
        "services-alternate" | "services-alumni-reset" => String::new(),
        "namespaces" => names(node),
        "replicas" => cluster::info::replicas(&node.cluster, command, true, true),
        "roster" => cluster::info::roster(&node.cluster, command),
        "roster-set" => cluster::info::roster_set(&node.cluster, command),
        "revive" => cluster::info::revive(&node.cluster, command),
        "replicas-all" => cluster::info::replicas(&node.cluster, command, false, true),
        "replicas-master" => cluster::info::replicas(&node.cluster, command, false, false),
        "replicas-max" => cluster::info::replicas_max(&node.cluster),
        "rack-ids" => cluster::info::rack_ids(&node.cluster),
        "racks" => cluster::info::racks(&node.cluster, command),
        "user-agent-set" => "ok".to_owned(),
        "user-agents" => String::new(),
        "cluster-stable" => cluster::info::cluster_stable(&node.cluster, command),
        "migrations-pending" => node.service().status().pending_sample.join(" | "),
        "recluster" => {
            if node.service().status().principal == node.node_id {
                node.service().send(cluster::Event::Recluster);
                "ok".to_owned()
            } else {
                "ignored-by-non-principal".to_owned()
            }
        }
        "statistics" => statistics(node),
        "latencies" => node.latencies.info_latencies(command.param("hist")),
        "latency-histograms" => node.latencies.info_histograms(command.param("hist")),
        "namespace" => match command
            .path
            .first()
            .and_then(|name| node.cluster.store.namespace(name.as_bytes()))
        {
            Some(namespace) => {
                let mut text = String::new();
                if let Some((index, _)) = node
                    .cluster
                    .store
                    .namespace_index(namespace.name().as_bytes())
                {
                    cluster::info::namespace(&node.cluster, index, &mut text);
                }
                text.push_str(&namespace_info(namespace));
                text
            }
            None => "type=unknown".to_owned(),
        },
        "sets" => sets(node, command),
        "bins" => bins(node, command),
        "get-config" | "config-get" => get_config(node, command),
        "set-config" | "config-set" if command.param("context") == Some("security") => {
            security_set_config(node, command)
        }
        "set-config" | "config-set"
            if command.param("context") == Some("namespace")
                && command.param("rack-id").is_some() =>
        {
            cluster::info::set_rack_id(&node.cluster, command)
        }
        "set-config" | "config-set" => crate::info_config::set_config(&node.cluster.store, command),
        "truncate" => truncate(node, command, false),
        "truncate-namespace" => truncate(node, command, true),
        "truncate-undo" | "truncate-namespace-undo" => {
            "ERROR:4:truncate-undo is not supported".to_owned()
        }
        "best-practices" => "failed_best_practices=none".to_owned(),
        "sindex-create" | "sindex-delete" | "sindex-exists" | "sindex-list" | "sindex-stat"
        | "sindex" => crate::info_sindex::answer(&node.cluster, command),
        "udf-put" | "udf-get" | "udf-list" | "udf-remove" | "query-show" | "scan-show" | "jobs"
        | "query-abort" | "scan-abort" | "query-abort-all" | "scan-abort-all" => {
            crate::info_udf::answer(&node.cluster, command)
        }
        "health-outliers" => String::new(),
        "logs" => "0:stderr".to_owned(),
        "status" => "ok".to_owned(),
        _ => "ERROR:4:unrecognized command".to_owned(),
    }
}

/// The longest namespace name (Aerospike's `AS_ID_NAMESPACE_SZ` less its
/// terminator).
const NAMESPACE_NAME_BYTES_MAX: usize = 31;

/// `truncate:namespace=<ns>;set=<set>[;lut=<ns since 1970>]` and
/// `truncate-namespace:namespace=<ns>[;lut=…]`: records last updated before
/// `lut` (default: now) vanish at once; a background sweep frees them.
fn truncate(node: &Info, command: &InfoCommand<'_>, whole_namespace: bool) -> String {
    // Parameter errors as Aerospike 8.1 words them (`cmd_truncate`).
    let name = match command.param("namespace") {
        None => return "ERROR:20:missing 'namespace'".to_owned(),
        Some("") => return "ERROR:20:missing 'namespace' value".to_owned(),
        Some(name) if name.len() > NAMESPACE_NAME_BYTES_MAX => {
            return "ERROR:20:'namespace' value too long".to_owned()
        }
        Some(name) => name,
    };
    let set = command.param("set").filter(|set| !set.is_empty());
    if whole_namespace == set.is_some() {
        return if whole_namespace {
            "ERROR:4:truncate-namespace takes no set".to_owned()
        } else {
            "ERROR:4:set is required (or use truncate-namespace)".to_owned()
        };
    }
    let now_ms = now_citrusleaf_milliseconds();
    let before_ms = match command.param("lut") {
        // Everything written up to and including this millisecond.
        None => now_ms + 1,
        Some(lut) => match lut.parse::<u64>() {
            Ok(nanos) => {
                let unix_ms = nanos / 1_000_000;
                let epoch_ms = CITRUSLEAF_EPOCH_UNIX_SECONDS * 1000;
                if unix_ms <= epoch_ms {
                    return "ERROR:4:lut is before 2010".to_owned();
                }
                if unix_ms - epoch_ms > now_ms {
                    return "ERROR:4:lut is in the future".to_owned();
                }
                unix_ms - epoch_ms
            }
            Err(_) => return format!("ERROR:4:bad lut '{lut}'"),
        },
    };
    let Some(namespace) = node.cluster.store.namespace(name.as_bytes()) else {
        // Aerospike keeps the truncation in the cluster's metadata and
        // answers "ok"; nodes holding the namespace apply it.
        cluster::remote::truncate_cluster_wide(&node.cluster, name, set, before_ms);
        return "ok".to_owned();
    };
    if let Err(error) = namespace.truncate(set.map(str::as_bytes), before_ms) {
        // Applied in memory, but it would not survive a restart: say so.
        return format!("ERROR:1:{error}");
    }
    tracing::info!(
        namespace = name,
        set = set.unwrap_or(""),
        before_ms,
        "truncate"
    );
    // Every other member truncates too, and nodes that join later.
    cluster::remote::truncate_cluster_wide(&node.cluster, name, set, before_ms);
    let namespace = namespace.clone();
    let spawned = std::thread::Builder::new()
        .name("truncate".into())
        .spawn(move || {
            let report = namespace.sweep(now_citrusleaf_seconds());
            tracing::info!(
                namespace = namespace.name(),
                removed = report.truncated,
                "truncate done"
            );
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "truncate sweep deferred to nsup");
    }
    "ok".to_owned()
}

/// This node's service address as seen by the client: the configured
/// access address, else the local address of the client's own connection
/// (always reachable by that client).
fn service_address(node: &Info, local: SocketAddr) -> String {
    match &node.config.access_address {
        Some(address) => format!("{address}:{}", node.config.service_port),
        None => match local {
            SocketAddr::V4(v4) => format!("{}:{}", v4.ip(), v4.port()),
            SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
        },
    }
}

/// This node's TLS service address (`service-tls-std`): as
/// [`service_address`], with the TLS port; empty without a TLS listener.
fn tls_service_address(node: &Info, local: SocketAddr) -> String {
    let Some(tls) = &node.config.service_tls else {
        return String::new();
    };
    let port = tls.access_port.unwrap_or(tls.port);
    match tls
        .access_address
        .as_ref()
        .or(node.config.access_address.as_ref())
    {
        Some(address) => format!("{address}:{port}"),
        None => match local {
            SocketAddr::V4(v4) => format!("{}:{port}", v4.ip()),
            SocketAddr::V6(v6) => format!("[{}]:{port}", v6.ip()),
        },
    }
}

/// The service's TLS settings in `get-config:context=network`, as
/// Aerospike lists them: one `service.tls-authenticate-client` per value.
fn network_tls(text: &mut String, config: &crate::config::Config, tls: &crate::config::ServiceTls) {
    let _ = write!(
        text,
        ";service.tls-address={};service.tls-port={};service.tls-access-address={};\
         service.tls-access-port={};service.tls-name={}",
        tls.address.unwrap_or(config.service_address),
        tls.port,
        tls.access_address.as_deref().unwrap_or(""),
        tls.access_port.unwrap_or(0),
        tls.name
    );
    authenticate_client(text, "service", &tls.authenticate_client);
}

/// The Redis port's TLS listener in `get-config:context=network`, in the
/// service's form (`redis.tls-port`, …).
fn network_redis_tls(
    text: &mut String,
    config: &crate::config::Config,
    tls: &crate::config::ServiceTls,
) {
    let _ = write!(
        text,
        ";redis.tls-address={};redis.tls-port={};redis.tls-name={}",
        tls.address.unwrap_or(config.redis_address),
        tls.port,
        tls.name
    );
    authenticate_client(text, "redis", &tls.authenticate_client);
}

/// `<prefix>.tls-authenticate-client`, once per value.
fn authenticate_client(text: &mut String, prefix: &str, auth: &crate::config::ClientAuth) {
    use crate::config::ClientAuth;
    match auth {
        ClientAuth::Off => {
            let _ = write!(text, ";{prefix}.tls-authenticate-client=false");
        }
        ClientAuth::Any => {
            let _ = write!(text, ";{prefix}.tls-authenticate-client=any");
        }
        ClientAuth::Names(names) => {
            for name in names {
                let _ = write!(text, ";{prefix}.tls-authenticate-client={name}");
            }
        }
    }
}

fn names(node: &Info) -> String {
    node.cluster
        .store
        .namespaces()
        .iter()
        .map(|ns| ns.name().to_owned())
        .collect::<Vec<_>>()
        .join(";")
}

fn statistics(node: &Info) -> String {
    let objects: i64 = node
        .cluster
        .store
        .namespaces()
        .iter()
        .map(|ns| ns.stats.objects.load(Relaxed))
        .sum();
    let (total, available) = system_memory_bytes();
    let free_pct = (available * 100).checked_div(total).unwrap_or(0);
    let mut text = String::new();
    cluster::info::statistics(&node.cluster, &mut text);
    let _ = write!(
        text,
        ";uptime={};objects={};client_connections={};client_connections_opened={};client_connections_closed={};\
         client_connections_refused={};tls_handshake_failures={};tls_connections={};tls_connections_opened={};\
         tls_certificate_reloads={};tls_certificate_reload_failures={};info_requests={};admin_requests={};bad_frames={};\
         proto_buffer_budget_bytes={};proto_buffer_used_bytes={};proto_buffer_waits={};proto_buffer_closed={};\
         process_rss_bytes={};system_total_memory_bytes={};system_free_mem_pct={};\
         service_threads={}",
        node.counters.started.elapsed().as_secs(),
        objects,
        node.counters.open_connections(),
        node.counters.connections_opened.load(Relaxed),
        node.counters.connections_closed.load(Relaxed),
        node.counters.connections_refused.load(Relaxed),
        node.counters.tls_handshake_failures.load(Relaxed),
        node.counters.open_tls_connections(),
        node.counters.tls_connections_opened.load(Relaxed),
        node.counters.tls_certificate_reloads.load(Relaxed),
        node.counters.tls_certificate_reload_failures.load(Relaxed),
        node.counters.info_requests.load(Relaxed),
        node.counters.admin_requests.load(Relaxed),
        node.counters.bad_frames.load(Relaxed),
        node.budget.limit_bytes(),
        node.budget.used_bytes(),
        node.budget.waits.load(Relaxed),
        node.budget.closed.load(Relaxed),
        process_rss_bytes(),
        total,
        free_pct,
        node.config.service_threads,
    );
    if let Some(security) = &node.security {
        for (name, value) in security.statistics() {
            let _ = write!(text, ";{name}={value}");
        }
    }
    text
}

/// `namespace/<ns>`: live statistics, then configuration.
pub fn namespace_info(namespace: &Namespace) -> String {
    let stats = &namespace.stats;
    let config = &namespace.config;
    let objects = stats.objects.load(Relaxed);
    let used = namespace.memory_used_bytes();
    let free_pct =
        100u64.saturating_sub(used.saturating_mul(100) / config.memory_size_bytes.max(1));
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Relaxed);
    let mut text = String::new();
    let _ = write!(
        text,
        "objects={objects};\
         memory_used_bytes={used};index_used_bytes={};data_used_bytes={};memory_free_pct={free_pct};\
         data_total_bytes={};data_used_pct={};stop_writes={};hwm_breached={};\
         expired_objects={};evicted_objects={};nsup_cycle_duration={};nsup_cycles={};\
         client_read_success={};client_read_not_found={};client_read_error={};\
         client_write_success={};client_write_error={};\
         client_delete_success={};client_delete_not_found={};client_delete_error={};\
         fail_generation={};fail_record_too_big={};fail_out_of_space={};\
         replication-factor={};default-ttl={};nsup-period={};allow-ttl-without-nsup={};\
         max-record-size={};storage-engine={};data-size={};memory-size={};\
         stop-writes-used-pct={};evict-used-pct={};evict-tenths-pct={};strong-consistency={};\
         strong-consistency-allow-expunge={};auto-revive={};auto_revived_partitions={}",
        stats.index_used_bytes.load(Relaxed),
        stats.data_used_bytes.load(Relaxed),
        config.memory_size_bytes,
        used.saturating_mul(100) / config.memory_size_bytes.max(1),
        namespace.is_stop_writes(),
        namespace.hwm_breached(),
        load(&stats.expired_objects),
        load(&stats.evicted_objects),
        load(&stats.nsup_cycle_duration_ms),
        load(&stats.nsup_cycles),
        load(&stats.client_read_success),
        load(&stats.client_read_not_found),
        load(&stats.client_read_error),
        load(&stats.client_write_success),
        load(&stats.client_write_error),
        load(&stats.client_delete_success),
        load(&stats.client_delete_not_found),
        load(&stats.client_delete_error),
        load(&stats.fail_generation),
        load(&stats.fail_record_too_big),
        load(&stats.fail_out_of_space),
        config.replication_factor,
        config.default_ttl_seconds,
        config.nsup_period_seconds,
        config.allow_ttl_without_nsup,
        config.max_record_size_bytes,
        match config.storage_engine {
            bolide_store::StorageEngine::Memory => "memory",
            bolide_store::StorageEngine::Device => "device",
        },
        config.memory_size_bytes,
        config.memory_size_bytes,
        config.stop_writes_used_percent,
        config.evict_used_percent,
        config.evict_tenths_percent,
        config.strong_consistency,
        config.strong_consistency_allow_expunge,
        config.auto_revive,
        load(&stats.auto_revived_partitions),
    );
    match namespace.device() {
        Some(device) => device_info(&mut text, device),
        // Nothing is compressed in memory (as Aerospike 7 shows it).
        None => text.push_str(";data_compression_ratio=1.000"),
    }
    text
}

/// Storage figures of a persistent namespace.
fn device_info(text: &mut String, device: &bolide_store::device::Device) {
    let stats = &device.stats;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Relaxed);
    let config = &device.config;
    let live = stats.live_bytes.load(Relaxed).max(0);
    let _ = write!(
        text,
        ";device_total_bytes={};device_used_bytes={live};device_used_pct={};\
         device_free_pct={};device_available_pct={};device_free_blocks={};device_total_blocks={};\
         storage-engine.write_q={};storage-engine.defrag_q={};\
         storage-engine.defrag_blocks={};storage-engine.defrag_reads={};storage-engine.defrag_writes={};\
         storage-engine.blocks_written={};storage-engine.partial_flushes={};storage-engine.syncs={};\
         storage-engine.tombstones_dropped={};storage-engine.write_errors={};storage-engine.write_failing={};\
         cold_start_ms={};cold_start_records={};cold_start_blocks={};\
         cold_start_damaged_entries={};cold_start_bad_blocks={};\
         storage-engine.filesize={};storage-engine.write-block-size={};storage-engine.flush-max-ms={};\
         storage-engine.commit-to-device={};storage-engine.defrag-lwm-pct={};storage-engine.defrag-sleep={};\
         storage-engine.min-avail-pct={};storage-engine.max-used-pct={};storage-engine.max-write-cache={};\
         storage-engine.data-in-memory={}",
        device.total_bytes(),
        device.used_pct(),
        100 - device.used_pct().min(100),
        device.available_pct(),
        device.free_blocks(),
        device.block_count(),
        device.write_queue(),
        device.defrag_queue(),
        load(&stats.defrag_blocks),
        load(&stats.defrag_reads),
        load(&stats.defrag_writes),
        load(&stats.blocks_written),
        load(&stats.partial_flushes),
        load(&stats.syncs),
        load(&stats.tombstones_dropped),
        load(&stats.write_errors),
        device.is_failing(),
        load(&stats.cold_start_ms),
        load(&stats.cold_start_records),
        load(&stats.cold_start_blocks),
        load(&stats.cold_start_corrupt_entries),
        load(&stats.cold_start_bad_blocks),
        config.file_size,
        config.write_block_size,
        config.flush_max_ms,
        config.commit_to_device,
        config.defrag_lwm_pct,
        config.defrag_sleep_us,
        config.min_avail_pct,
        config.max_used_pct,
        config.max_write_cache,
        config.data_in_memory,
    );
    for (index, path) in config.files.iter().enumerate() {
        let _ = write!(text, ";storage-engine.file[{index}]={}", path.display());
    }
    crate::info_config::compression_info(text, device);
}

fn set_line(
    node: &Info,
    namespace: &Namespace,
    set: &str,
    stats: &bolide_store::namespace::SetStats,
    with_names: bool,
) -> String {
    let prefix = if with_names {
        format!("ns={}:set={set}:", namespace.name())
    } else {
        String::new()
    };
    // The set's secondary indexes, and whether one is still being built.
    let indexes: Vec<_> = node
        .cluster
        .services
        .sindexes
        .list(Some(namespace.name()))
        .into_iter()
        .filter(|index| index.definition.set.as_deref() == Some(set))
        .collect();
    let populating = indexes.iter().any(|index| !index.is_readable());
    format!(
        "{prefix}objects={}:tombstones=0:data_used_bytes={}:truncate_lut={}:sindexes={}:index_populating={populating}:\
         truncating={}:default-read-touch-ttl-pct=0:default-ttl={}:disable-eviction=false:enable-index=false:\
         stop-writes-count=0:stop-writes-size=0",
        stats.objects.load(Relaxed).max(0),
        stats.data_used_bytes.load(Relaxed).max(0),
        stats.truncate_lut_ms.load(Relaxed),
        indexes.len(),
        namespace.is_truncating(stats),
        namespace.config.default_ttl_seconds,
    )
}

/// `sets`, `sets/<ns>`, `sets/<ns>/<set>`.
fn sets(node: &Info, command: &InfoCommand<'_>) -> String {
    let namespaces: Vec<_> = match command.path.first() {
        Some(name) => match node.cluster.store.namespace(name.as_bytes()) {
            Some(namespace) => vec![namespace.clone()],
            None => return "ns_type=unknown".to_owned(),
        },
        None => node.cluster.store.namespaces().to_vec(),
    };
    if let (Some(namespace), Some(set)) = (namespaces.first(), command.path.get(1)) {
        return match namespace.sets().find(|(name, _)| name == set) {
            Some((name, stats)) => set_line(node, namespace, name, stats, false),
            None => String::new(),
        };
    }
    let mut text = String::new();
    for namespace in &namespaces {
        for (name, stats) in namespace.sets() {
            text.push_str(&set_line(node, namespace, name, stats, true));
            text.push(';');
        }
    }
    text
}

fn bins(node: &Info, command: &InfoCommand<'_>) -> String {
    let mut text = String::new();
    for namespace in node.cluster.store.namespaces() {
        if command
            .path
            .first()
            .is_some_and(|name| *name != namespace.name())
        {
            continue;
        }
        let _ = write!(
            text,
            "{}:bin_names=0,bin_names_quota=65535;",
            namespace.name()
        );
    }
    text
}

/// `set-config:context=security;NAME=VALUE` (the caller's `set-config`
/// permission, which `sys-admin` holds, was checked before).
fn security_set_config(node: &Info, command: &InfoCommand<'_>) -> String {
    let Some(security) = &node.security else {
        return "ERROR:4:security is not enabled (no security { } in the configuration)".to_owned();
    };
    let parameters: Vec<(&str, &str)> = command
        .params
        .iter()
        .filter(|(key, _)| *key != "context")
        .copied()
        .collect();
    match bolide_security::settings::set_config(security, &parameters) {
        Ok(()) => {
            tracing::info!(command = command.text, "security setting changed");
            "ok".to_owned()
        }
        Err(error) => format!("ERROR:4:{error}"),
    }
}

fn get_config(node: &Info, command: &InfoCommand<'_>) -> String {
    let config = &node.config;
    match command.param("context").unwrap_or("service") {
        // Empty on an open node, as on Aerospike CE.
        "security" => node
            .security
            .as_deref()
            .map(bolide_security::settings::config_text)
            .unwrap_or_default(),
        "service" => format!(
            "cluster-name={};node-id={:X};service-threads={};proto-fd-max={};proto-fd-idle-ms={};\
             stop-writes-sys-memory-pct={}",
            config.cluster_name,
            node.node_id,
            config.service_threads,
            config.proto_fd_max,
            config.proto_fd_idle_ms,
            config.stop_writes_sys_memory_pct
        ),
        "network" => {
            let mut text = format!(
                "service.address={};service.port={};heartbeat.mode={};heartbeat.port={};heartbeat.interval={};\
                 heartbeat.timeout={};fabric.port={};info.port={}",
                config.service_address,
                config.service_port,
                config.heartbeat_mode,
                // A TLS-only channel has no plain port.
                if config.heartbeat_tls.is_some() { 0 } else { config.heartbeat_port },
                config.heartbeat_interval_ms,
                config.heartbeat_timeout,
                if config.fabric_tls.is_some() { 0 } else { config.fabric_port },
                config.info_port.map_or_else(String::new, |p| p.to_string())
            );
            if let Some(tls) = &config.service_tls {
                network_tls(&mut text, config, tls);
            }
            if let Some(tls) = &config.redis_tls {
                network_redis_tls(&mut text, config, tls);
            }
            for (which, tls) in [
                ("heartbeat", &config.heartbeat_tls),
                ("fabric", &config.fabric_tls),
            ] {
                if let Some(tls) = tls {
                    let _ = write!(
                        text,
                        ";{which}.tls-port={};{which}.tls-name={}",
                        tls.port, tls.name
                    );
                }
            }
            text
        }
        "namespace" => {
            let name = command
                .param("namespace")
                .or_else(|| command.param("id"))
                .unwrap_or("");
            match node.cluster.store.namespace_index(name.as_bytes()) {
                Some((index, namespace)) => {
                    let c = &namespace.config;
                    format!(
                        "replication-factor={};default-ttl={};nsup-period={};allow-ttl-without-nsup={};\
                         max-record-size={};storage-engine=memory;storage-engine.data-size={};\
                         storage-engine.stop-writes-used-pct={};storage-engine.evict-used-pct={};\
                         evict-tenths-pct={};strong-consistency={};strong-consistency-allow-expunge={};\
                         auto-revive={};rack-id={}",
                        c.replication_factor,
                        c.default_ttl_seconds,
                        c.nsup_period_seconds,
                        c.allow_ttl_without_nsup,
                        c.max_record_size_bytes,
                        c.memory_size_bytes,
                        c.stop_writes_used_percent,
                        c.evict_used_percent,
                        c.evict_tenths_percent,
                        c.strong_consistency,
                        c.strong_consistency_allow_expunge,
                        c.auto_revive,
                        node.service().rack_id(index)
                    ) + &crate::info_config::compression_config(namespace)
                }
                None => "ERROR:20:namespace not found".to_owned(),
            }
        }
        "logging" => format!("level={}", config.log_level),
        other => format!("ERROR:4:unsupported context {other}"),
    }
}
