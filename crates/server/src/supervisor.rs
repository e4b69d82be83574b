//! The background supervisor: once a second it runs each namespace's
//! expiry and eviction sweep when its nsup-period is due, and watches the
//! machine's free memory so writes stop before the node could be OOM-killed.

use crate::cluster::Context;
use crate::system::system_memory_bytes;
use bolide_types::now_citrusleaf_seconds;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_secs(1);

/// Starts the supervisor thread; writes stop on every namespace while the
/// machine's used memory is at or above `stop_writes_sys_memory_pct`.
pub fn start(node: Arc<Context>, stop_writes_sys_memory_pct: u32) {
    let spawned = std::thread::Builder::new()
        .name("supervisor".into())
        .spawn(move || run(&node, stop_writes_sys_memory_pct));
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start supervisor: records will not expire");
    }
}

fn run(node: &Context, stop_writes_sys_memory_pct: u32) {
    let mut last_sweep: Vec<Instant> = node
        .store
        .namespaces()
        .iter()
        .map(|_| Instant::now())
        .collect();
    let mut last_raid = Instant::now();
    loop {
        std::thread::sleep(TICK);
        guard_system_memory(node, stop_writes_sys_memory_pct);
        if last_raid.elapsed() >= TOMB_RAID_PERIOD {
            last_raid = Instant::now();
            raid_tombstones(node);
        }
        for (namespace, last) in node.store.namespaces().iter().zip(last_sweep.iter_mut()) {
            let period = u64::from(namespace.config.nsup_period_seconds);
            if period == 0 || last.elapsed() < Duration::from_secs(period) {
                continue;
            }
            *last = Instant::now();
            let started = Instant::now();
            let report = namespace.sweep(now_citrusleaf_seconds());
            let elapsed_ms = started.elapsed().as_millis() as u64;
            namespace
                .stats
                .nsup_cycle_duration_ms
                .store(elapsed_ms, Relaxed);
            namespace.stats.nsup_cycles.fetch_add(1, Relaxed);
            if report.expired > 0 || report.evicted > 0 {
                tracing::info!(
                    namespace = namespace.name(),
                    expired = report.expired,
                    evicted = report.evicted,
                    elapsed_ms,
                    "nsup cycle"
                );
            }
        }
    }
}

/// How often old tombstones are looked for.
const TOMB_RAID_PERIOD: Duration = Duration::from_secs(10);

/// Forgets tombstones older than each namespace's
/// `tomb-raider-eligible-age`, but only while no migration runs: a copy
/// being merged might still hold the record they delete.
fn raid_tombstones(node: &Context) {
    let status = node.cluster.status();
    if !status.migrate_allowed || status.migrate_partitions_remaining > 0 {
        return;
    }
    let now_ms = bolide_types::now_citrusleaf_milliseconds();
    for namespace in node.store.namespaces() {
        if !namespace.keeps_tombstones() || namespace.stats.tombstones.load(Relaxed) == 0 {
            continue;
        }
        let age_ms = u64::from(namespace.config.tomb_raider_eligible_age_seconds) * 1000;
        let raided = namespace.raid_tombstones(now_ms.saturating_sub(age_ms));
        if raided > 0 {
            node.cluster
                .counters
                .tombstones_raided
                .fetch_add(raided, Relaxed);
            tracing::info!(namespace = namespace.name(), raided, "tombstones forgotten");
        }
    }
}

/// Stops writes on every namespace while the machine's used memory is
/// above `stop-writes-sys-memory-pct`.
fn guard_system_memory(node: &Context, stop_writes_sys_memory_pct: u32) {
    let (total, available) = system_memory_bytes();
    if total == 0 {
        return;
    }
    let used_pct = (total - available.min(total)) * 100 / total;
    let stop = used_pct >= u64::from(stop_writes_sys_memory_pct);
    for namespace in node.store.namespaces() {
        if namespace.system_memory_stop() != stop {
            tracing::warn!(
                namespace = namespace.name(),
                used_pct,
                stop,
                "system memory stop-writes changed"
            );
        }
        namespace.set_system_memory_stop(stop);
    }
}
