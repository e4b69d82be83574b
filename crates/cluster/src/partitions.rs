//! This node's side of every partition after a rebalance: its version, who
//! the working master is, which copies it still waits for, which it still
//! sends, and when it may drop an extra copy. Driven by the plan at each
//! cluster key and by the data path's reports of finished migrations.

use crate::plan::{self, Member, NamespacePlan, PartitionPlan};
use crate::routing::{self, flag, ConflictPolicy, NamespaceRouting, Route, BITMAP_BYTES};
use crate::version::Version;
use crate::NodeId;
use bolide_types::PARTITION_COUNT;

/// Why a partition is sent somewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmigrationKind {
    /// From the acting master to the final master; mastership moves with
    /// it when it ends.
    Handoff,
    /// A copy that may hold records the final master lacks.
    Merge,
    /// From the complete final master to a replica that needs data.
    Fill,
}

/// A migration this node must start: send partition `pid` of namespace
/// `namespace` (index) to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emigration {
    pub namespace: usize,
    pub pid: u16,
    pub to: NodeId,
    pub key: u64,
    pub kind: EmigrationKind,
}

/// One partition as this node sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Local {
    /// The working master now, as far as this node knows.
    pub master: Member,
    /// (Final master) members whose copies have not arrived yet.
    pub sources: Vec<Member>,
    /// (Replica) waiting for the final master's fill.
    pub fill_from: Option<Member>,
    /// (Final master) replicas not yet filled.
    pub fills_pending: Vec<Member>,
    /// Emigrations under way from here.
    pub emigrating: Vec<(Member, EmigrationKind)>,
    /// (Final master) extra holders not yet told to drop.
    pub signals: Vec<Member>,
    pub signal_sent_ms: u64,
    /// (Extra holder) keeps its copy until the final master says.
    pub awaiting_all_done: bool,
}

/// Counts since the last rebalance, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MigrationCounts {
    pub tx_initial: u64,
    pub rx_initial: u64,
    pub signals_initial: u64,
    pub fresh_partitions: u64,
}

/// One namespace on this node.
#[derive(Clone, Debug)]
pub struct NamespaceState {
    pub name: String,
    pub replication_factor: usize,
    pub policy: ConflictPolicy,
    /// Strong consistency: a version's `subset` flag means "may miss a
    /// write acknowledged in its lineage", nothing more. A replica that
    /// holds every acknowledged write stays full while copies not merged
    /// yet are merged into it (what it serves is gated by the migration
    /// state: `fill_from`, `sources`), so a rebalance in the middle of
    /// migrations still finds the partition's data.
    pub strong_consistency: bool,
    pub versions: Vec<Version>,
    pub plan: Option<NamespacePlan>,
    pub local: Vec<Local>,
    pub counts: MigrationCounts,
}

/// What partition changes ask the rest of the node to do.
#[derive(Debug, Default)]
pub struct Effects {
    pub emigrations: Vec<Emigration>,
    pub drops: Vec<(usize, u16)>,
    /// (to member, namespace, pid)
    pub signals: Vec<(Member, usize, u16)>,
    pub claims_changed: bool,
}

impl NamespaceState {
    pub fn new(
        name: String,
        replication_factor: usize,
        policy: ConflictPolicy,
        versions: Vec<Version>,
    ) -> NamespaceState {
        assert_eq!(versions.len(), PARTITION_COUNT);
        NamespaceState {
            name,
            replication_factor,
            policy,
            strong_consistency: false,
            versions,
            plan: None,
            local: vec![Local::default(); PARTITION_COUNT],
            counts: MigrationCounts::default(),
        }
    }

    /// Puts the plan at `key` in force for member `me`. `frozen` (strong
    /// consistency) names the partitions this sub-cluster may not serve:
    /// nothing about them moves (no version change, migration or drop).
    #[allow(clippy::too_many_arguments)]
    pub fn apply_plan(
        &mut self,
        index: usize,
        plan: NamespacePlan,
        members: &[NodeId],
        me: Member,
        now_ms: u64,
        effects: &mut Effects,
        frozen: Option<&[bool]>,
    ) {
        let key = plan.key;
        let n = plan.n_replicas;
        self.counts = MigrationCounts::default();
        for pid in 0..PARTITION_COUNT {
            let part = &plan.partitions[pid];
            if frozen.is_some_and(|frozen| frozen[pid]) {
                self.local[pid] = Local {
                    master: part.working_master,
                    ..Local::default()
                };
                continue;
            }
            let before = self.versions[pid];
            let mut after = plan::version_after(part, n, key, me, before);
            if self.strong_consistency
                && after.subset
                && !before.is_null()
                && before.is_full()
                && part.replica_position(me, n).is_some()
            {
                // (SC) A replica with every acknowledged write keeps them
                // and gets every new one: full, though it is to be filled
                // (or to receive the handoff) with the merged copies.
                after.subset = false;
            }
            self.versions[pid] = after;
            let mut local = Local {
                master: part.working_master,
                ..Local::default()
            };
            if part.fresh {
                self.counts.fresh_partitions += 1;
                self.local[pid] = local;
                continue;
            }
            let final_master = part.final_master();
            let moving = needs_migration(part);
            let emigrate = |to: Member, kind: EmigrationKind, effects: &mut Effects| {
                effects.emigrations.push(Emigration {
                    namespace: index,
                    pid: pid as u16,
                    to: members[usize::from(to)],
                    key,
                    kind,
                });
            };
            if me == final_master {
                local.sources = part.final_master_sources();
                self.counts.rx_initial += local.sources.len() as u64;
                self.counts.tx_initial += part.fills.len() as u64;
                if moving {
                    self.counts.signals_initial += part.extra_holders.len() as u64;
                }
            } else if me == part.working_master {
                emigrate(final_master, EmigrationKind::Handoff, effects);
                local
                    .emigrating
                    .push((final_master, EmigrationKind::Handoff));
                self.counts.tx_initial += 1;
            }
            if me != final_master && part.duplicates.contains(&me) {
                emigrate(final_master, EmigrationKind::Merge, effects);
                local.emigrating.push((final_master, EmigrationKind::Merge));
                self.counts.tx_initial += 1;
            }
            if me != final_master && part.fills.contains(&me) {
                local.fill_from = Some(final_master);
                self.counts.rx_initial += 1;
            }
            if part.extra_holders.contains(&me) {
                if moving {
                    local.awaiting_all_done = true;
                } else {
                    self.versions[pid] = Version::NULL;
                    effects.drops.push((index, pid as u16));
                }
            }
            self.local[pid] = local;
            if me == final_master && self.local[pid].sources.is_empty() {
                self.final_master_complete(index, pid, &plan, members, me, now_ms, effects);
            }
        }
        self.plan = Some(plan);
        effects.claims_changed = true;
    }

    /// The final master has every copy: it is full, fills the replicas
    /// that need data, and (once they are filled) tells extra holders.
    #[allow(clippy::too_many_arguments)]
    fn final_master_complete(
        &mut self,
        index: usize,
        pid: usize,
        plan: &NamespacePlan,
        members: &[NodeId],
        me: Member,
        now_ms: u64,
        effects: &mut Effects,
    ) {
        let part = &plan.partitions[pid];
        let local = &mut self.local[pid];
        self.versions[pid] = Version::full(plan.key).with_master(local.master == me);
        local.fills_pending = part.fills.iter().copied().filter(|&m| m != me).collect();
        for &to in &local.fills_pending {
            effects.emigrations.push(Emigration {
                namespace: index,
                pid: pid as u16,
                to: members[usize::from(to)],
                key: plan.key,
                kind: EmigrationKind::Fill,
            });
            local.emigrating.push((to, EmigrationKind::Fill));
        }
        if local.fills_pending.is_empty() {
            start_signals(local, part, index, pid, me, now_ms, effects);
        }
        effects.claims_changed = true;
    }

    /// A copy of `pid` from `from` has arrived whole.
    #[allow(clippy::too_many_arguments)]
    pub fn immigration_done(
        &mut self,
        index: usize,
        pid: usize,
        from: Member,
        members: &[NodeId],
        me: Member,
        now_ms: u64,
        effects: &mut Effects,
    ) {
        let Some(plan) = self.plan.take() else { return };
        let part = &plan.partitions[pid];
        let local = &mut self.local[pid];
        if me == part.final_master() && local.sources.contains(&from) {
            local.sources.retain(|&m| m != from);
            if from == part.working_master && local.master != me {
                local.master = me;
                self.versions[pid].master = true;
                if self.strong_consistency {
                    // (SC) The handoff brought every acknowledged write;
                    // copies still to merge hold none this one lacks.
                    self.versions[pid].subset = false;
                }
                effects.claims_changed = true;
            }
            if local.sources.is_empty() {
                self.final_master_complete(index, pid, &plan, members, me, now_ms, effects);
            }
        } else if local.fill_from == Some(from) {
            local.fill_from = None;
            self.versions[pid] = Version::full(plan.key);
            effects.claims_changed = true;
        }
        self.plan = Some(plan);
    }

    /// An emigration of `pid` to `to` has ended (acknowledged).
    pub fn emigration_done(
        &mut self,
        index: usize,
        pid: usize,
        to: Member,
        me: Member,
        now_ms: u64,
        effects: &mut Effects,
    ) {
        let Some(plan) = &self.plan else { return };
        let part = &plan.partitions[pid];
        let n = plan.n_replicas;
        let key = plan.key;
        let local = &mut self.local[pid];
        let Some(at) = local.emigrating.iter().position(|&(m, _)| m == to) else {
            return;
        };
        let (_, kind) = local.emigrating.remove(at);
        match kind {
            EmigrationKind::Handoff => {
                local.master = to;
                // No longer the master: the copy is complete only if this
                // node stays a replica that receives every write and needs
                // no fill (or has had it: the fill can end first).
                let replica = part.replica_position(me, n).is_some();
                // (SC) A replica keeps receiving every write: it stays full
                // while it waits for its fill.
                let kept = replica && (local.fill_from.is_none() || self.strong_consistency);
                self.versions[pid] = if kept {
                    Version::full(key)
                } else {
                    Version::partial(key)
                };
                effects.claims_changed = true;
            }
            EmigrationKind::Merge => {}
            EmigrationKind::Fill => {
                local.fills_pending.retain(|&m| m != to);
                effects.claims_changed = true;
                if local.fills_pending.is_empty() {
                    start_signals(local, part, index, pid, me, now_ms, effects);
                }
            }
        }
    }

    /// The final master says every replica is complete: drop an extra
    /// copy. Returns false while this node still sends its own copy (the
    /// signal will come again).
    pub fn all_done(&mut self, index: usize, pid: usize, effects: &mut Effects) -> bool {
        let local = &mut self.local[pid];
        if !local.awaiting_all_done {
            return true;
        }
        if !local.emigrating.is_empty() {
            return false;
        }
        local.awaiting_all_done = false;
        self.versions[pid] = Version::NULL;
        effects.drops.push((index, pid as u16));
        true
    }

    pub fn all_done_ack(&mut self, pid: usize, from: Member) {
        self.local[pid].signals.retain(|&m| m != from);
    }

    /// Signals not acknowledged for a second are sent again.
    pub fn resend_signals(&mut self, index: usize, now_ms: u64, effects: &mut Effects) {
        for (pid, local) in self.local.iter_mut().enumerate() {
            if !local.signals.is_empty() && now_ms >= local.signal_sent_ms + 1000 {
                local.signal_sent_ms = now_ms;
                for &to in &local.signals {
                    effects.signals.push((to, index, pid as u16));
                }
            }
        }
    }

    /// Migrations still to run, (transmit, receive, signals).
    pub fn remaining(&self, me: Member) -> (u64, u64, u64) {
        let Some(plan) = &self.plan else {
            return (0, 0, 0);
        };
        let (mut tx, mut rx, mut signals) = (0, 0, 0);
        for (pid, local) in self.local.iter().enumerate() {
            tx += local.emigrating.len() as u64;
            let part = &plan.partitions[pid];
            if me == part.final_master() && !local.sources.is_empty() {
                // Fills start once the final master is complete.
                tx += part.fills.iter().filter(|&&m| m != me).count() as u64;
            }
            rx += local.sources.len() as u64 + u64::from(local.fill_from.is_some());
            signals += local.signals.len() as u64 + u64::from(local.awaiting_all_done);
        }
        (tx, rx, signals)
    }

    /// This node's routes and `replicas` claims. `blocked` (an orphan past
    /// its grace) serves nothing.
    pub fn routing(&self, me: Member, blocked: bool) -> NamespaceRouting {
        let unavailable = Route {
            flags: flag::UNAVAILABLE,
            ..Route::default()
        };
        let Some(plan) = self.plan.as_ref().filter(|_| !blocked) else {
            return NamespaceRouting {
                name: self.name.clone(),
                replication_factor: self.replication_factor,
                n_replicas: self.plan.as_ref().map_or(1, |p| p.n_replicas),
                conflict_policy: self.policy,
                routes: vec![unavailable; PARTITION_COUNT],
                claims: vec![[0u8; BITMAP_BYTES]; self.plan.as_ref().map_or(1, |p| p.n_replicas)],
                strong_consistency: false,
                regime: 0,
                clock_skew_stop_writes: false,
                order: Vec::new(),
            };
        };
        let n = plan.n_replicas;
        let mut routes = Vec::with_capacity(PARTITION_COUNT);
        let mut claims = vec![[0u8; BITMAP_BYTES]; n];
        for (pid, part) in plan.partitions.iter().enumerate() {
            let local = &self.local[pid];
            let version = self.versions[pid];
            let is_master = local.master == me;
            let position = part.replica_position(me, n);
            let complete = !version.is_null() && !version.subset && local.fill_from.is_none();
            let mut route = Route {
                master: local.master,
                final_master: part.final_master(),
                ..Route::default()
            };
            let holders = part
                .order
                .iter()
                .take(n)
                .chain(std::iter::once(&local.master));
            for &member in holders {
                let listed = route.destinations().contains(&member);
                if member != me
                    && !listed
                    && usize::from(route.destination_count) < routing::DESTINATIONS_MAX
                {
                    route.destinations[usize::from(route.destination_count)] = member;
                    route.destination_count += 1;
                }
            }
            if is_master {
                route.flags |= flag::WRITE | flag::READ;
                // Until the merge ends, a write first resolves the record
                // against the copies not merged yet.
                route.duplicates = if me == part.final_master() {
                    local
                        .sources
                        .iter()
                        .fold(0u64, |mask, &member| mask | 1u64 << member)
                } else {
                    part.resolve_against_mask(me)
                };
                if local
                    .emigrating
                    .iter()
                    .any(|&(_, kind)| kind == EmigrationKind::Handoff)
                {
                    route.flags |= flag::GATED;
                }
            } else if position.is_some_and(|p| p > 0) && complete {
                route.flags |= flag::READ;
            }
            let final_master = part.final_master();
            if me == final_master {
                route.immigrate_from |= part.final_master_sources_mask();
            } else if part.fills.contains(&me) {
                route.immigrate_from |= 1u64 << final_master;
            }
            routes.push(route);
            // Claims, as Aerospike makes them: column 0 is the working
            // master; a replica claims its column once complete; the
            // working master claims the columns of replicas still filling.
            if is_master {
                routing::set_bit(&mut claims[0], pid);
            }
            for (column, &member) in part.order.iter().enumerate().take(n).skip(1) {
                let claim = if member == me {
                    complete || is_master
                } else if is_master {
                    // Still filling: the final master knows; before it is
                    // complete, every replica it will fill is.
                    if me == final_master {
                        local.fills_pending.contains(&member)
                            || !local.sources.is_empty() && part.fills.contains(&member)
                    } else {
                        part.fills.contains(&member)
                    }
                } else {
                    false
                };
                if claim {
                    routing::set_bit(&mut claims[column], pid);
                }
            }
        }
        let mut order = Vec::with_capacity(PARTITION_COUNT * n);
        for part in &plan.partitions {
            let first = part.order.iter().take(n).copied();
            order.extend(first.chain(std::iter::repeat(u8::MAX)).take(n));
        }
        NamespaceRouting {
            name: self.name.clone(),
            replication_factor: self.replication_factor,
            n_replicas: n,
            conflict_policy: self.policy,
            routes,
            claims,
            strong_consistency: false,
            regime: 0,
            clock_skew_stop_writes: false,
            order,
        }
    }
}

fn needs_migration(part: &PartitionPlan) -> bool {
    !part.final_master_sources().is_empty() || !part.fills.is_empty() || !part.duplicates.is_empty()
}

fn start_signals(
    local: &mut Local,
    part: &PartitionPlan,
    index: usize,
    pid: usize,
    me: Member,
    now_ms: u64,
    effects: &mut Effects,
) {
    if !needs_migration(part) {
        return;
    }
    local.signals = part
        .extra_holders
        .iter()
        .copied()
        .filter(|&m| m != me)
        .collect();
    local.signal_sent_ms = now_ms;
    for &to in &local.signals {
        effects.signals.push((to, index, pid as u16));
    }
}
