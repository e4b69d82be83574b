//! The node as an owner of its parts: it builds them from the
//! configuration and hands each part the narrow context it needs (a
//! connection its [`connection::Context`], the info commands their
//! [`Info`], the cluster thread and the fabric their [`cluster::Context`],
//! the HTTP port its [`Http`]). No module takes a `Node`: only `run` and
//! the in-process test fixtures hold one.

use crate::access::Secured;
use crate::budget::Budget;
use crate::cluster;
use crate::config::Config;
use crate::connection::{self, RemoteWork};
use crate::counters::NodeCounters;
use crate::http::Http;
use crate::info::Info;
use crate::latency::Latencies;
use bolide_store::Store;
use bolide_transaction::{Remote, RemoteRunner, Services};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub struct Node {
    pub config: Arc<Config>,
    pub node_id: u64,
    /// Store, services and the cluster service.
    pub cluster: Arc<cluster::Context>,
    pub counters: Arc<NodeCounters>,
    /// Connection buffers beyond each connection's allowance.
    pub budget: Arc<Budget>,
    /// Latency histograms (`latencies:`, `/metrics`, the console).
    pub latencies: Arc<Latencies>,
    pub info: Arc<Info>,
    /// Carries out batch rows' work on other nodes (from blocking threads).
    pub runner: Arc<dyn RemoteRunner>,
    /// Access control, on a node configured with `security { }`.
    pub secured: Option<Arc<Secured>>,
}

impl Node {
    /// Builds the node; persistent namespaces are read back from storage
    /// here (the cold start).
    pub fn new(config: Config) -> Result<Node, String> {
        let config = Arc::new(config);
        let node_id = config
            .node_id
            .unwrap_or_else(|| crate::system::default_node_id(config.service_port));
        let store = Arc::new(Store::open(config.namespaces.clone())?);
        // Index population is background work, like defragmentation.
        let services = Services::open(
            &store,
            config.work_directory.as_deref(),
            Arc::new(|| crate::system::set_thread_nice(crate::system::BACKGROUND_NICE)),
        )?;
        let cluster = cluster::Context::new(&config, node_id, store, services);
        // TLS between nodes: the files are read now, so a bad one stops
        // the node with its name.
        for (which, tls, slot) in [
            ("fabric", &config.fabric_tls, &cluster.cluster.fabric_tls),
            (
                "heartbeat",
                &config.heartbeat_tls,
                &cluster.cluster.heartbeat_tls,
            ),
        ] {
            let Some(tls) = tls else { continue };
            let settings = config
                .tls
                .iter()
                .find(|spec| spec.name == tls.name)
                .ok_or_else(|| {
                    format!("network {which} tls-name {}: no such tls context", tls.name)
                })?;
            let contexts = crate::net::tls::NodeTls::new(settings)
                .map_err(|error| format!("network {which}: {error}"))?;
            let _ = slot.set(contexts);
        }
        let secured = match &config.security {
            None => None,
            Some(security) => {
                if let Some(directory) = &config.work_directory {
                    std::fs::create_dir_all(directory).map_err(|error| {
                        format!("work-directory {}: {error}", directory.display())
                    })?;
                }
                let security = Arc::new(bolide_security::Security::open(
                    security.clone(),
                    config.work_directory.as_deref(),
                )?);
                let _ = cluster.security.set(Arc::clone(&security));
                let sharing = Arc::clone(&cluster);
                let share = Box::new(move |entries: &[bolide_security::catalog::Entry]| {
                    sharing.cluster.share_and_wait(
                        cluster::security::MODULE,
                        entries
                            .iter()
                            .map(|entry| (entry.key.as_str(), entry.value.as_str(), entry.deleted)),
                    );
                });
                Some(Arc::new(Secured::new(security, share)))
            }
        };
        let runner = cluster.runner();
        let budget = Arc::new(Budget::new(
            config
                .proto_buffer_budget_bytes
                .unwrap_or_else(Budget::default_limit_bytes),
        ));
        let latencies = Arc::new(Latencies::new(
            cluster.store.namespaces().iter().map(|ns| ns.name()),
            config.service_threads,
        ));
        let counters = Arc::new(NodeCounters::default());
        let info = Arc::new(Info::new(
            Arc::clone(&config),
            node_id,
            Arc::clone(&cluster),
            Arc::clone(&latencies),
            Arc::clone(&budget),
            Arc::clone(&counters),
            secured
                .as_ref()
                .map(|secured| Arc::clone(&secured.security)),
        ));
        Ok(Node {
            config,
            node_id,
            cluster,
            counters,
            budget,
            latencies,
            info,
            runner,
            secured,
        })
    }

    /// Node name as clients see it: upper-case hex without leading zeros.
    pub fn name(&self) -> String {
        format!("{:X}", self.node_id)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.cluster.store
    }

    /// Serves every partition of every namespace here, with no cluster
    /// thread (a node embedded in tests and fuzz targets).
    pub fn serve_alone(&self) {
        self.cluster.serve_alone();
    }

    /// What a client connection needs.
    pub fn connection_context(&self) -> connection::Context {
        connection::Context {
            store: Arc::clone(&self.cluster.store),
            routing: Arc::clone(&self.cluster.cluster.routing),
            gates: Arc::clone(&self.cluster.cluster.gates),
            runner: Arc::clone(&self.runner),
            remote: Arc::new(Fabric(Arc::clone(&self.cluster))),
            info: Arc::clone(&self.info),
            budget: Arc::clone(&self.budget),
            latencies: Arc::clone(&self.latencies),
            counters: Arc::clone(&self.counters),
            secured: self.secured.clone(),
            idle: match self.config.proto_fd_idle_ms {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
        }
    }

    /// What the HTTP port needs.
    pub fn http(&self) -> Http {
        Http::new(
            Arc::clone(&self.info),
            self.config.service_address,
            self.config.service_port,
        )
        .secured(self.secured.clone())
    }
}

/// Remote work of client requests, carried out over the fabric.
struct Fabric(Arc<cluster::Context>);

impl RemoteWork for Fabric {
    fn complete(&self, remote: Remote) -> Pin<Box<dyn Future<Output = Vec<u8>>>> {
        cluster::remote::complete(Arc::clone(&self.0), remote)
    }
}
