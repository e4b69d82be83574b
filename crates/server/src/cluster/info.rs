//! The cluster's info commands and statistics, in Aerospike's formats:
//! what smart clients poll to learn the nodes (`peers-clear-std`,
//! `peers-generation`, `services`) and the partition map
//! (`partition-generation`, `replicas`), what tools ask
//! (`cluster-stable`, `statistics`, `namespace/NS`), and the racks
//! (`rack-ids`, `racks:`, `set-config` of `rack-id`).

use super::Context;
use base64::Engine;
use bolide_cluster::message::Endpoint;
use bolide_cluster::node::{NamespaceRacks, Status};
use bolide_wire::info::InfoCommand;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

/// `partition-generation`: -1 until the first map, then bumped with
/// every change of this node's claims.
pub fn partition_generation(node: &Context) -> String {
    node.cluster.routing.load().generation.to_string()
}

/// `replicas` (`ns:regime,count,col0,...`), `replicas-all`
/// (`ns:count,...`) and `replicas-master` (`ns:col0`).
pub fn replicas(
    node: &Context,
    command: &InfoCommand<'_>,
    with_regime: bool,
    with_count: bool,
) -> String {
    let routing = node.cluster.routing.load();
    let max = command
        .param("max")
        .and_then(|max| max.parse::<usize>().ok())
        .unwrap_or(usize::MAX);
    let encoder = &base64::engine::general_purpose::STANDARD;
    let mut text = String::new();
    for (index, ns) in routing.namespaces.iter().enumerate() {
        if index > 0 {
            text.push(';');
        }
        let columns = if with_count {
            ns.claims.len().min(max).max(1)
        } else {
            1
        };
        let _ = write!(text, "{}:", ns.name);
        if with_regime {
            let _ = write!(text, "{},", regime(node, index, ns.regime));
        }
        if with_count {
            let _ = write!(text, "{columns},");
        }
        for column in 0..columns {
            if column > 0 {
                text.push(',');
            }
            match ns.claims.get(column) {
                Some(bitmap) => text.push_str(&encoder.encode(bitmap)),
                None => {
                    text.push_str(&encoder.encode([0u8; bolide_cluster::routing::BITMAP_BYTES]))
                }
            }
        }
    }
    text
}

/// The regime `replicas` reports: 0 for AP; for SC the machine's, never
/// 0 (clients decide SC from the first answer they see).
fn regime(node: &Context, index: usize, published: u32) -> u32 {
    let sc = node
        .store
        .namespaces()
        .get(index)
        .is_some_and(|ns| ns.config.strong_consistency);
    if !sc {
        return 0;
    }
    let status = node.cluster.status();
    let known = status.sc.get(index).map_or(0, |sc| sc.regime);
    published.max(known).max(bolide_cluster::sc::FIRST_REGIME)
}

fn sc_namespace<'a>(
    node: &'a Context,
    name: Option<&str>,
) -> Result<(usize, &'a std::sync::Arc<bolide_store::Namespace>), String> {
    let Some(name) = name else {
        return Err("ERROR:4:missing namespace".to_owned());
    };
    match node.store.namespace_index(name.as_bytes()) {
        Some((index, ns)) if ns.config.strong_consistency => Ok((index, ns)),
        Some(_) => Err("ERROR:4:namespace is not strong-consistency".to_owned()),
        None => Err("ERROR:20:namespace not found".to_owned()),
    }
}

/// One namespace's `roster=..:pending_roster=..:observed_nodes=..`.
fn roster_of(node: &Context, index: usize, name: &str) -> String {
    use bolide_cluster::sc::Roster;
    let status = node.cluster.status();
    let active = status
        .sc
        .get(index)
        .map(|sc| sc.roster.clone())
        .unwrap_or_default();
    let pending = node
        .cluster
        .metadata
        .lock()
        .ok()
        .and_then(|items| {
            items
                .iter()
                .find(|item| {
                    item.module == bolide_cluster::node::ROSTER_MODULE
                        && item.key == name
                        && !item.deleted
                })
                .map(|item| item.value.clone())
        })
        .and_then(|value| Roster::parse(&value).ok())
        .unwrap_or_else(|| active.clone());
    let mut observed = status.succession.clone();
    if observed.is_empty() {
        observed.push(node.cluster.node_id);
    }
    observed.sort_unstable_by(|a, b| b.cmp(a));
    // Each observed node with the rack it is configured with, as
    // `roster-set` takes it (rack 0 has no suffix).
    let racks = status.racks.get(index);
    let observed: Vec<String> = observed
        .iter()
        .map(|&n| {
            let rack = racks
                .and_then(|racks| racks.observed.iter().find(|(node, _)| *node == n))
                .map(|&(_, rack)| rack)
                .or_else(|| (n == node.cluster.node_id).then(|| node.cluster.rack_id(index)))
                .unwrap_or(0);
            roster_entry(n, rack)
        })
        .collect();
    format!(
        "roster={active}:pending_roster={pending}:observed_nodes={}",
        observed.join(",")
    )
}

/// `roster:` (every SC namespace, `ns=NS:` first) or
/// `roster:namespace=NS`.
pub fn roster(node: &Context, command: &InfoCommand<'_>) -> String {
    if let Some(name) = command.param("namespace") {
        return match sc_namespace(node, Some(name)) {
            Ok((index, _)) => roster_of(node, index, name),
            Err(error) => error,
        };
    }
    node.store
        .namespaces()
        .iter()
        .enumerate()
        .filter(|(_, ns)| ns.config.strong_consistency)
        .map(|(index, ns)| format!("ns={}:{}", ns.name(), roster_of(node, index, ns.name())))
        .collect::<Vec<_>>()
        .join(";")
}

/// `roster-set:namespace=NS;nodes=LIST`: stages the roster cluster-wide;
/// it takes effect at the next `recluster:`.
pub fn roster_set(node: &Context, command: &InfoCommand<'_>) -> String {
    let (_, ns) = match sc_namespace(node, command.param("namespace")) {
        Ok(found) => found,
        Err(error) => return error,
    };
    let Some(nodes) = command.param("nodes") else {
        return "ERROR:4:missing nodes".to_owned();
    };
    let roster = match bolide_cluster::sc::Roster::parse(nodes) {
        Ok(roster) => roster,
        Err(error) => return format!("ERROR:4:{error}"),
    };
    if !roster.is_empty() && roster.len() < ns.config.replication_factor as usize {
        return format!(
            "ERROR:4:roster of {} nodes is smaller than replication-factor {}",
            roster.len(),
            ns.config.replication_factor
        );
    }
    node.cluster.share(
        bolide_cluster::node::ROSTER_MODULE,
        ns.name(),
        &roster.to_string(),
        false,
    );
    "ok".to_owned()
}

/// `revive:[namespace=NS]`: node-local, then `recluster:`. The partitions
/// this node's last rebalance found dead (every roster node present, no
/// copy left that holds every acknowledged write) are flagged revived on
/// this node; the next rebalance serves them with what their copies hold.
pub fn revive(node: &Context, command: &InfoCommand<'_>) -> String {
    let namespace = match command.param("namespace") {
        Some(name) => match sc_namespace(node, Some(name)) {
            Ok((index, _)) => Some(index),
            Err(error) => return error,
        },
        None => None,
    };
    let (answer, answered) = std::sync::mpsc::channel();
    node.cluster
        .send(super::Event::Revive { namespace, answer });
    match answered.recv_timeout(std::time::Duration::from_secs(5)) {
        Ok(revived) => {
            tracing::info!(
                target: "cluster",
                "revive: {revived} dead partitions flagged; complete - issue 'recluster:' command"
            );
            "ok".to_owned()
        }
        Err(_) => "ERROR:7:failed revive".to_owned(),
    }
}

/// A node as rosters and `observed_nodes` write it: `NODE` or
/// `NODE@RACK` (rack 0 has no suffix).
fn roster_entry(node: u64, rack: u32) -> String {
    if rack == 0 {
        format!("{node:X}")
    } else {
        format!("{node:X}@{rack}")
    }
}

/// This node's racks for namespace `index`: from the cluster machine, or
/// (no cluster thread, or before its first report) its configured one.
fn racks_of(node: &Context, status: &Status, index: usize) -> NamespaceRacks {
    status.racks.get(index).cloned().unwrap_or_else(|| {
        let rack = node.cluster.rack_id(index);
        NamespaceRacks {
            configured: rack,
            effective: rack,
            members: vec![(node.cluster.node_id, rack)],
            observed: vec![(node.cluster.node_id, rack)],
        }
    })
}

/// `rack-ids`: `NS:RACK;NS2:RACK`, the rack this node is placed by in
/// every namespace (its rack in the map in force; SC: its roster rack).
/// The clients' rack-aware replica policy reads it.
pub fn rack_ids(node: &Context) -> String {
    let status = node.cluster.status();
    node.store
        .namespaces()
        .iter()
        .enumerate()
        .map(|(index, ns)| format!("{}:{}", ns.name(), racks_of(node, &status, index).effective))
        .collect::<Vec<_>>()
        .join(";")
}

/// `racks:[namespace=NS]`: per namespace, the members of the map in force
/// grouped by rack, `ns=NS:rack_R=NODE,NODE:rack_R2=...`, groups sorted
/// by rack; an SC namespace with a roster adds its roster's groups
/// (`roster_rack_R=...`). With `namespace=NS` the `ns=NS:` prefix is left
/// out.
pub fn racks(node: &Context, command: &InfoCommand<'_>) -> String {
    let status = node.cluster.status();
    let one = |index: usize| -> String {
        let racks = racks_of(node, &status, index);
        let mut text = groups("rack", &racks.members);
        if let Some(sc) = status
            .sc
            .get(index)
            .filter(|sc| sc.enabled && !sc.roster.is_empty())
        {
            let roster: Vec<(u64, u32)> =
                sc.roster.entries.iter().map(|e| (e.node, e.rack)).collect();
            text.push(':');
            text.push_str(&groups("roster_rack", &roster));
        }
        text
    };
    if let Some(name) = command.param("namespace") {
        return match node.store.namespace_index(name.as_bytes()) {
            Some((index, _)) => one(index),
            None => "ERROR:20:namespace not found".to_owned(),
        };
    }
    node.store
        .namespaces()
        .iter()
        .enumerate()
        .map(|(index, ns)| format!("ns={}:{}", ns.name(), one(index)))
        .collect::<Vec<_>>()
        .join(";")
}

/// `PREFIX_R=NODE,NODE:PREFIX_R2=...`, racks ascending, nodes descending.
fn groups(prefix: &str, nodes: &[(u64, u32)]) -> String {
    let mut by_rack: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    for &(node, rack) in nodes {
        by_rack.entry(rack).or_default().push(node);
    }
    by_rack
        .into_iter()
        .map(|(rack, mut nodes)| {
            nodes.sort_unstable_by(|a, b| b.cmp(a));
            let nodes: Vec<String> = nodes.iter().map(|n| format!("{n:X}")).collect();
            format!("{prefix}_{rack}={}", nodes.join(","))
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// `set-config:context=namespace;id=NS;rack-id=N`: this node's rack for
/// the namespace from now on. As in Aerospike it is used from the next
/// rebalance: `recluster:` (or any change of the cluster). Not kept across
/// a restart: change the config file too.
pub fn set_rack_id(node: &Context, command: &InfoCommand<'_>) -> String {
    let Some(name) = command.param("id").or_else(|| command.param("namespace")) else {
        return "ERROR:4:id (the namespace) is required".to_owned();
    };
    let Some((index, _)) = node.store.namespace_index(name.as_bytes()) else {
        return "ERROR:20:namespace not found".to_owned();
    };
    let others = [
        "compression",
        "compression-level",
        "compression-acceleration",
    ];
    if others.iter().any(|other| command.param(other).is_some()) {
        return "ERROR:4:rack-id is set on its own".to_owned();
    }
    let value = command.param("rack-id").unwrap_or_default();
    let max = bolide_cluster::sc::RACK_ID_MAX;
    let rack = match value.parse::<u32>() {
        Ok(rack) if rack <= max => rack,
        _ => return format!("ERROR:4:rack-id must be 0 to {max}"),
    };
    let before = node.cluster.rack_id(index);
    node.cluster.set_rack_id(index, rack);
    tracing::info!(
        target: "cluster",
        "{{{name}}} rack-id {before} -> {rack}: takes effect at the next rebalance (recluster:)"
    );
    "ok".to_owned()
}

/// `replicas-max`: the columns each namespace has.
pub fn replicas_max(node: &Context) -> String {
    let routing = node.cluster.routing.load();
    routing
        .namespaces
        .iter()
        .map(|ns| format!("{}:{}", ns.name, ns.n_replicas))
        .collect::<Vec<_>>()
        .join(";")
}

fn host_port(endpoint: &Endpoint, default_port: u16) -> String {
    let host = if endpoint.host.contains(':') {
        format!("[{}]", endpoint.host)
    } else {
        endpoint.host.clone()
    };
    if endpoint.port == default_port {
        host
    } else {
        format!("{host}:{}", endpoint.port)
    }
}

/// `peers-clear-std`: `gen,3000,[[NODE,,[host[:port],...]],...]`, the other
/// members of this node's cluster.
pub fn peers(node: &Context) -> String {
    let status = node.cluster.status();
    let mut text = format!("{},3000,[", status.peers_generation);
    for (index, peer) in status.peers.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        let hosts: Vec<String> = peer.service.iter().map(|e| host_port(e, 3000)).collect();
        let _ = write!(text, "[{:X},,[{}]]", peer.node, hosts.join(","));
    }
    text.push(']');
    text
}

/// `peers-tls-std`: `gen,3000,[[NODE,TLS-NAME,[host[:port],...]],...]`,
/// the other members that serve clients over TLS, with the name their
/// certificate carries. Each node shares its TLS service endpoints as
/// cluster metadata (module [`TLS_SERVICE_MODULE`]), so a TLS client that
/// seeds one node discovers every node over TLS.
pub fn peers_tls(node: &Context) -> String {
    let status = node.cluster.status();
    let items = node
        .cluster
        .metadata
        .lock()
        .map(|items| items.clone())
        .unwrap_or_default();
    let mut text = format!("{},3000,[", status.peers_generation);
    let mut first = true;
    for peer in &status.peers {
        let key = format!("{:X}", peer.node);
        let Some(item) = items
            .iter()
            .find(|item| item.module == TLS_SERVICE_MODULE && item.key == key && !item.deleted)
        else {
            continue;
        };
        let Some((name, hosts)) = parse_tls_service(&item.value) else {
            continue;
        };
        if !first {
            text.push(',');
        }
        first = false;
        let hosts: Vec<String> = hosts.iter().map(|e| host_port(e, 3000)).collect();
        let _ = write!(text, "[{key},{name},[{}]]", hosts.join(","));
    }
    text.push(']');
    text
}

/// The metadata module in which each node shares its TLS service
/// endpoints (key: the node id in hex).
pub const TLS_SERVICE_MODULE: &str = "tls-service";

/// The metadata module in which each node shares where it serves the
/// Redis protocol over TLS (key: the node id in hex; value as
/// [`tls_service_value`]).
pub const REDIS_TLS_MODULE: &str = "redis-tls";

/// Where `peer` serves the Redis protocol over TLS, as it shared it.
pub fn peer_redis_tls(node: &Context, peer: bolide_cluster::NodeId) -> Option<Endpoint> {
    let key = format!("{peer:X}");
    let items = node.cluster.metadata.lock().ok()?;
    let item = items
        .iter()
        .find(|item| item.module == REDIS_TLS_MODULE && item.key == key && !item.deleted)?;
    parse_tls_service(&item.value).and_then(|(_, endpoints)| endpoints.into_iter().next())
}

/// A node's TLS service as shared: `TLS-NAME;host:port,host:port`.
pub fn tls_service_value(name: &str, endpoints: &[Endpoint]) -> String {
    let hosts: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
    format!("{name};{}", hosts.join(","))
}

/// Reads [`tls_service_value`]'s text back (None: not of that form; a
/// peer's value is the peer's to choose, and is checked here).
fn parse_tls_service(value: &str) -> Option<(&str, Vec<Endpoint>)> {
    let (name, hosts) = value.split_once(';')?;
    let valid = |text: &str| {
        !text.is_empty()
            && text.len() <= 255
            && text
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"-._*".contains(&byte))
    };
    if !valid(name) {
        return None;
    }
    let mut endpoints = Vec::new();
    for host in hosts.split(',').filter(|host| !host.is_empty()) {
        let (address, port) = host.rsplit_once(':')?;
        let address = address.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse().ok()?;
        if address.is_empty()
            || !address
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b))
        {
            return None;
        }
        endpoints.push(Endpoint {
            host: address.to_owned(),
            port,
        });
    }
    (!endpoints.is_empty()).then_some((name, endpoints))
}

/// `services`: the other members' `host:port`, `;`-separated.
pub fn services(node: &Context) -> String {
    let status = node.cluster.status();
    status
        .peers
        .iter()
        .flat_map(|peer| peer.service.iter())
        .map(|endpoint| format!("{}:{}", endpoint.host, endpoint.port))
        .collect::<Vec<_>>()
        .join(";")
}

/// `cluster-stable[:size=N;ignore-migrations=BOOL;namespace=NS]`: the
/// cluster key when the cluster is settled (no exchange running, and,
/// unless migrations are ignored, none remaining), else `ERROR:7:...`.
pub fn cluster_stable(node: &Context, command: &InfoCommand<'_>) -> String {
    let status = node.cluster.status();
    if let Some(size) = command.param("size") {
        if size.len() > 3 {
            return "ERROR:4:'size' value too long".to_owned();
        }
        let Ok(size) = size.parse::<usize>() else {
            return "ERROR:4:bad size".to_owned();
        };
        if size != status.cluster_size {
            return "ERROR:7:cluster not specified size".to_owned();
        }
    }
    let ignore_migrations = match command.param("ignore-migrations") {
        None => false,
        Some("true") => true,
        Some("false") => false,
        Some(_) => return "ERROR:4:bad ignore migrations".to_owned(),
    };
    let namespace = match command.param("namespace") {
        None => None,
        Some(name) => match node.store.namespace_index(name.as_bytes()) {
            Some((index, _)) => Some(index),
            None => return "ERROR:20:namespace not found".to_owned(),
        },
    };
    if !status.is_member || !status.migrate_allowed || status.cluster_key == 0 {
        return "ERROR:7:unstable cluster".to_owned();
    }
    if !ignore_migrations {
        let remaining = status
            .namespaces
            .iter()
            .enumerate()
            .filter(|(index, _)| namespace.is_none_or(|ns| ns == *index))
            .any(|(_, ns)| ns.tx_remaining + ns.rx_remaining + ns.signals_remaining > 0);
        if remaining {
            return "ERROR:7:unstable cluster".to_owned();
        }
    }
    format!("{:X}", status.cluster_key)
}

/// The cluster's part of `statistics`.
pub fn statistics(node: &Context, text: &mut String) {
    let status = node.cluster.status();
    let counters = &node.cluster.counters;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Relaxed);
    let since_rebalance = super::monotonic_ms().saturating_sub(status.last_rebalance_ms) / 1000;
    // Every member speaks this node's clustering protocol (others never
    // join).
    let protocol = bolide_cluster::message::PROTOCOL;
    let _ = write!(
        text,
        "cluster_size={};cluster_key={:X};cluster_generation={};cluster_principal={:X};\
         cluster_min_compatibility_id={protocol};cluster_max_compatibility_id={protocol};\
         cluster_integrity={};cluster_is_member={};cluster_duplicate_nodes=null;\
         cluster_clock_skew_stop_writes_sec={};cluster_clock_skew_ms={};cluster_clock_skew_outliers={};\
         cluster_name={};paxos_principal={:X};migrate_allowed={};migrate_partitions_remaining={};\
         time_since_rebalance={since_rebalance};rebalance_generation={};\
         heartbeat_received_self={};heartbeat_received_foreign={};heartbeat_nodes={};\
         heartbeat_connections_opened={};heartbeat_connections_closed={};heartbeat_bad_frames={};\
         heartbeat_buffered_bytes={};heartbeat_tls_handshake_failures={};\
         fabric_connections_opened={};fabric_connections_closed={};fabric_bad_frames={};\
         fabric_tls_handshake_failures={};\
         proxy_in_progress={};client_proxy_complete={};client_proxy_error={};client_proxy_timeout={};\
         from_proxy_complete={};from_proxy_redirect={};\
         replica_writes_sent={};replica_writes_received={};replica_writes_refused={};replica_write_timeouts={};\
         dup_res_fetches={};migrate_records_transmitted={};migrate_record_receives={};migrate_records_applied={};\
         migrate_records_skipped={};migrate_partitions_sent={};migrate_partitions_received={};tombstones_raided={}",
        status.cluster_size,
        status.cluster_key,
        status.cluster_generation,
        status.principal,
        status.integrity,
        status.is_member,
        skew_stop_writes_sec(node, &status),
        status.clock_skew_ms,
        if status.clock_skew_outliers.is_empty() {
            "null".to_owned()
        } else {
            status
                .clock_skew_outliers
                .iter()
                .map(|node| format!("{node:X}"))
                .collect::<Vec<_>>()
                .join(",")
        },
        node.cluster.cluster_name,
        status.principal,
        status.migrate_allowed,
        status.migrate_partitions_remaining,
        status.rebalance_generation,
        status.heartbeat_received_self,
        status.heartbeat_received_foreign,
        status.heartbeat_nodes,
        load(&counters.heartbeat_connections_opened),
        load(&counters.heartbeat_connections_closed),
        load(&counters.heartbeat_bad_frames),
        load(&counters.heartbeat_buffered_bytes),
        load(&counters.heartbeat_tls_handshake_failures),
        load(&counters.fabric_connections_opened),
        load(&counters.fabric_connections_closed),
        load(&counters.fabric_bad_frames),
        load(&counters.fabric_tls_handshake_failures),
        load(&counters.proxy_in_progress),
        load(&counters.client_proxy_complete),
        load(&counters.client_proxy_error),
        load(&counters.client_proxy_timeout),
        load(&counters.from_proxy_complete),
        load(&counters.from_proxy_redirect),
        load(&counters.replica_writes_sent),
        load(&counters.replica_writes_received),
        load(&counters.replica_writes_refused),
        load(&counters.replica_write_timeouts),
        load(&counters.dup_res_fetches),
        load(&counters.migrate_records_transmitted),
        load(&counters.migrate_records_received),
        load(&counters.migrate_records_applied),
        load(&counters.migrate_records_skipped),
        load(&counters.migrate_partitions_sent),
        load(&counters.migrate_partitions_received),
        load(&counters.tombstones_raided),
    );
}

/// `cluster_clock_skew_stop_writes_sec`: the skew at which writes stop,
/// for the strictest namespace here (strong consistency, else AP with nsup
/// running; 0: never).
fn skew_stop_writes_sec(node: &Context, status: &bolide_cluster::Status) -> u64 {
    let namespaces = &node.cluster.namespaces;
    if namespaces.iter().any(|ns| ns.strong_consistency) {
        status.clock_skew_stop_writes_ms / 1000
    } else if namespaces.iter().any(|ns| ns.nsup) {
        bolide_cluster::skew::AP_STOP_WRITES_MS / 1000
    } else {
        0
    }
}

/// The cluster's part of `namespace/NS`: records by role and migrations.
pub fn namespace(node: &Context, index: usize, text: &mut String) {
    let routing = node.cluster.routing.load();
    let status = node.cluster.status();
    let Some(ns) = node.store.namespaces().get(index) else {
        return;
    };
    let (mut master, mut prole, mut non_replica) = (0u64, 0u64, 0u64);
    let (mut master_tombstones, mut prole_tombstones) = (0u64, 0u64);
    let mut unavailable = 0u64;
    let routes = routing.namespaces.get(index);
    for pid in 0..bolide_types::PARTITION_COUNT {
        let (records, tombstones) = ns.partition_counts(pid);
        let route = routes.map(|r| r.route(pid)).unwrap_or_default();
        if route.unavailable() {
            unavailable += 1;
        }
        if route.writes_here() {
            master += records as u64;
            master_tombstones += tombstones as u64;
        } else if route.reads_here() {
            prole += records as u64;
            prole_tombstones += tombstones as u64;
        } else {
            non_replica += records as u64;
        }
    }
    let migrations = status.namespaces.get(index).cloned().unwrap_or_default();
    let n_replicas = routes.map_or(1, |r| r.n_replicas);
    let sc = status.sc.get(index).filter(|sc| sc.enabled);
    let (unavailable, dead) = match sc {
        Some(sc) => (sc.unavailable, sc.dead),
        None => (unavailable, 0),
    };
    let ns_cluster_size = match sc {
        Some(sc) => routing
            .members
            .iter()
            .filter(|&&member| sc.roster.contains(member))
            .count(),
        None => routing.members.len(),
    };
    let _ = write!(
        text,
        "ns_cluster_size={};effective_replication_factor={n_replicas};master_objects={master};\
         prole_objects={prole};non_replica_objects={non_replica};master_tombstones={master_tombstones};\
         prole_tombstones={prole_tombstones};tombstones={};unreplicated_records={};\
         dead_partitions={dead};unavailable_partitions={unavailable};clock_skew_stop_writes={};\
         migrate_tx_partitions_initial={};migrate_tx_partitions_remaining={};\
         migrate_rx_partitions_initial={};migrate_rx_partitions_remaining={};\
         migrate_signals_remaining={};migrate_fresh_partitions={};\
         effective_active_rack={};\
         conflict-resolution-policy={};write-commit-level-override={};tomb-raider-eligible-age={};migrate-sleep={};\
         rack-id={};",
        ns_cluster_size,
        ns.stats.tombstones.load(Relaxed).max(0),
        node.cluster.gates.unreplicated_count(index),
        status
            .sc
            .get(index)
            .is_some_and(|sc| sc.clock_skew_stop_writes),
        migrations.tx_initial,
        migrations.tx_remaining,
        migrations.rx_initial,
        migrations.rx_remaining,
        migrations.signals_remaining,
        migrations.fresh_partitions,
        sc.and_then(|sc| sc.roster.active_rack).unwrap_or(0),
        if ns.config.conflict_resolution_last_update_time {
            "last-update-time"
        } else {
            "generation"
        },
        if ns.config.write_commit_level_master { "master" } else { "off" },
        ns.config.tomb_raider_eligible_age_seconds,
        ns.config.migrate_sleep_us,
        node.cluster.rack_id(index),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_service_values_round_trip_and_hostile_ones_are_passed_over() {
        let endpoints = vec![
            Endpoint {
                host: "10.0.0.5".into(),
                port: 4333,
            },
            Endpoint {
                host: "::1".into(),
                port: 3000,
            },
        ];
        let value = tls_service_value("db.example.com", &endpoints);
        assert_eq!(value, "db.example.com;10.0.0.5:4333,[::1]:3000");
        let (name, parsed) = parse_tls_service(&value).expect("parses");
        assert_eq!(name, "db.example.com");
        assert_eq!(parsed, endpoints);
        for hostile in [
            "",
            "name",
            "na]me;1.2.3.4:1",
            "name;",
            "name;1.2.3.4",
            "name;1.2.3.4:99999",
            "name;a b:1",
            "x,[y];1.2.3.4:1",
        ] {
            assert!(parse_tls_service(hostile).is_none(), "{hostile}");
        }
    }
}
