//! The configuration file: the `aerospike.conf` subset Bolide supports.
//!
//! Directives are one per line (`name value...`), blocks are `name [arg] {`
//! … `}`, `#` starts a comment. Anything unknown or malformed is an error
//! naming the line and the directive; the node does not start.

use bolide_store::device::compress::{
    ACCELERATION_MAX as COMPRESSION_ACCELERATION_MAX, LEVEL_MAX as COMPRESSION_LEVEL_MAX,
};
use bolide_store::device::{WRITE_BLOCK_MAX, WRITE_BLOCK_MIN};
use bolide_store::{DeviceConfig, Method, NamespaceConfig, StorageEngine};
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

mod security;
mod tls;

pub use crate::net::tls::{ClientAuth, Protocols, TlsSettings};
pub use tls::{ClusterTls, ServiceTls, TLS_REFRESH_PERIOD_SECONDS_DEFAULT, TLS_STANZAS_MAX};

/// The smallest `proto-buffer-budget`: room for a few large frames.
pub const PROTO_BUFFER_BUDGET_MIN: u64 = 1 << 20;

/// The HTTP port (`/metrics`, the console) of a node started without a
/// configuration file.
pub const DEFAULT_HTTP_PORT: u16 = 8081;
/// The RESP port of a node started without a configuration file.
pub const DEFAULT_REDIS_PORT: u16 = 6379;

/// The node's whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub cluster_name: String,
    pub node_id: Option<u64>,
    pub service_threads: usize,
    pub proto_fd_max: usize,
    pub proto_fd_idle_ms: u64,
    /// Node-wide budget for connection buffers; None: the default (the
    /// smaller of 256 MiB and 5% of the machine's memory).
    pub proto_buffer_budget_bytes: Option<u64>,
    pub pidfile: Option<PathBuf>,
    /// Where node metadata (secondary index definitions, UDF modules) is
    /// kept; None: in memory only.
    pub work_directory: Option<PathBuf>,
    pub log_level: String,
    pub log_file: Option<PathBuf>,
    pub service_address: IpAddr,
    pub service_port: u16,
    pub access_address: Option<String>,
    pub info_port: Option<u16>,
    pub fabric_port: u16,
    /// Where fabric and heartbeat listen (default: the service address).
    pub fabric_address: Option<IpAddr>,
    pub heartbeat_address: Option<IpAddr>,
    pub heartbeat_port: u16,
    /// A `heartbeat` block is configured: the node listens for other nodes
    /// (heartbeat and fabric ports) and clusters with them. Without one it
    /// is a cluster of one that opens no other port.
    pub clustering: bool,
    pub heartbeat_mode: String,
    pub heartbeat_interval_ms: u64,
    pub heartbeat_timeout: u64,
    /// Test knob (`heartbeat { test-clock-offset-ms N }`): added to the wall
    /// clock this node puts in its heartbeats, to provoke the clock-skew
    /// rules in tests without changing the machine's clock. 0 in use.
    pub test_clock_offset_ms: i64,
    pub mesh_seeds: Vec<(String, u16)>,
    /// Partitions sent at once by this node's migrations.
    pub migrate_threads: usize,
    /// Partitions received at once.
    pub migrate_max_num_incoming: usize,
    /// A request's deadline when the client sends none.
    pub transaction_max_ms: u64,
    /// No cluster smaller than this forms.
    pub min_cluster_size: usize,
    pub stop_writes_sys_memory_pct: u32,
    /// Seconds per `latencies:` time slice (`ticker-interval`).
    pub ticker_interval_seconds: u64,
    /// `network { http { address; port } }`: `/metrics` and the console;
    /// off (None) unless configured, on 127.0.0.1:8081 without a file.
    pub http_address: IpAddr,
    pub http_port: Option<u16>,
    /// `network { tls NAME { … } }` contexts (docs/tls.md).
    pub tls: Vec<TlsSettings>,
    /// `network { service { tls-port; tls-name; … } }`: the TLS client
    /// listener, presenting context `tls-name`.
    pub service_tls: Option<ServiceTls>,
    /// `network { fabric { tls-port; tls-name } }`: fabric connections
    /// are mutual TLS only, on `fabric_port` (= the tls-port).
    pub fabric_tls: Option<ClusterTls>,
    /// `network { heartbeat { tls-port; tls-name;
    /// tls-mesh-seed-address-port } }`: heartbeats are mutual TLS only, on
    /// `heartbeat_port` (= the tls-port), to the `mesh_seeds`.
    pub heartbeat_tls: Option<ClusterTls>,
    /// `service { tls-refresh-period }`: certificates, keys, CAs and
    /// blacklists are read again this often.
    pub tls_refresh_period_seconds: u32,
    /// `network { redis { address; port; namespace } }`: the RESP port
    /// (None: off). Without a configuration file it is 127.0.0.1:6379,
    /// and a port already taken only warns (`redis_optional`).
    pub redis_address: IpAddr,
    pub redis_port: Option<u16>,
    pub redis_optional: bool,
    /// The namespace Redis keys live in (None: the first one).
    pub redis_namespace: Option<String>,
    /// `network { redis { tls-port; tls-name; tls-address;
    /// tls-authenticate-client } }`: a TLS listener for RESP clients.
    pub redis_tls: Option<ServiceTls>,
    pub namespaces: Vec<NamespaceConfig>,
    /// `security { }`: access control on (None: off, as without the stanza).
    pub security: Option<bolide_security::SecurityConfig>,
}

/// A configuration error, naming the line and the directive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub line: usize,
    pub directive: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "config error: {}", self.message)
        } else {
            write!(
                f,
                "config error: line {}: directive '{}': {}",
                self.line, self.directive, self.message
            )
        }
    }
}

impl std::error::Error for ConfigError {}

impl Default for Config {
    /// The embedded default: namespace `test` in memory on 127.0.0.1:3000.
    fn default() -> Config {
        Config {
            cluster_name: "bolide".to_owned(),
            node_id: None,
            service_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            proto_fd_max: 15_000,
            proto_fd_idle_ms: 0,
            proto_buffer_budget_bytes: None,
            pidfile: None,
            work_directory: None,
            log_level: "info".to_owned(),
            log_file: None,
            service_address: IpAddr::from([127, 0, 0, 1]),
            service_port: 3000,
            access_address: None,
            info_port: None,
            fabric_port: 3001,
            fabric_address: None,
            heartbeat_address: None,
            heartbeat_port: 3002,
            clustering: false,
            heartbeat_mode: "mesh".to_owned(),
            heartbeat_interval_ms: 150,
            heartbeat_timeout: 10,
            test_clock_offset_ms: 0,
            mesh_seeds: Vec::new(),
            migrate_threads: 1,
            migrate_max_num_incoming: 4,
            transaction_max_ms: 1000,
            min_cluster_size: 1,
            stop_writes_sys_memory_pct: 90,
            ticker_interval_seconds: 10,
            http_address: IpAddr::from([127, 0, 0, 1]),
            http_port: Some(DEFAULT_HTTP_PORT),
            tls: Vec::new(),
            service_tls: None,
            fabric_tls: None,
            heartbeat_tls: None,
            tls_refresh_period_seconds: TLS_REFRESH_PERIOD_SECONDS_DEFAULT,
            redis_address: IpAddr::from([127, 0, 0, 1]),
            redis_port: Some(DEFAULT_REDIS_PORT),
            redis_optional: true,
            redis_namespace: None,
            redis_tls: None,
            namespaces: vec![NamespaceConfig::with_name("test")],
            security: None,
        }
    }
}

/// One directive: its line, name and values.
struct Directive<'t> {
    line: usize,
    name: &'t str,
    values: Vec<&'t str>,
}

impl Directive<'_> {
    fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            line: self.line,
            directive: self.name.to_owned(),
            message: message.into(),
        }
    }

    fn one(&self) -> Result<&str, ConfigError> {
        match self.values.as_slice() {
            [value] => Ok(value),
            _ => Err(self.error(format!(
                "expects exactly one value, got {}",
                self.values.len()
            ))),
        }
    }

    fn number<T: std::str::FromStr>(&self) -> Result<T, ConfigError> {
        let value = self.one()?;
        value
            .parse()
            .map_err(|_| self.error(format!("'{value}' is not a valid number")))
    }

    fn percent(&self) -> Result<u32, ConfigError> {
        let value: u32 = self.number()?;
        if value > 100 {
            return Err(self.error(format!("{value} is not a percentage (0-100)")));
        }
        Ok(value)
    }

    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.one()? {
            "true" | "yes" => Ok(true),
            "false" | "no" => Ok(false),
            other => Err(self.error(format!("'{other}' is not true or false"))),
        }
    }

    /// A size with optional K, M, G, T suffix (powers of 1024).
    fn size(&self) -> Result<u64, ConfigError> {
        let value = self.one()?;
        parse_scaled(
            value,
            &[
                ('K', 1 << 10),
                ('M', 1 << 20),
                ('G', 1 << 30),
                ('T', 1 << 40),
            ],
        )
        .ok_or_else(|| self.error(format!("'{value}' is not a size (like 512M or 4G)")))
    }

    /// A duration in seconds with optional s, m, h, d suffix.
    fn seconds(&self) -> Result<u32, ConfigError> {
        let value = self.one()?;
        parse_scaled(value, &[('S', 1), ('M', 60), ('H', 3600), ('D', 86_400)])
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                self.error(format!(
                    "'{value}' is not a duration (like 30, 10m, 1h, 30d)"
                ))
            })
    }
}

fn parse_scaled(value: &str, units: &[(char, u64)]) -> Option<u64> {
    let upper = value.to_ascii_uppercase();
    for &(suffix, scale) in units {
        if let Some(number) = upper.strip_suffix(suffix) {
            return number.parse::<u64>().ok()?.checked_mul(scale);
        }
    }
    upper.parse().ok()
}

/// A parsed tree: directives and nested blocks.
enum Item<'t> {
    Directive(Directive<'t>),
    Block {
        head: Directive<'t>,
        items: Vec<Item<'t>>,
    },
}

fn tree(text: &str) -> Result<Vec<Item<'_>>, ConfigError> {
    let mut stack: Vec<(Directive<'_>, Vec<Item<'_>>)> = Vec::new();
    let mut top: Vec<Item<'_>> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let mut tokens: Vec<&str> = content.split_whitespace().collect();
        if tokens == ["}"] {
            let Some((head, items)) = stack.pop() else {
                return Err(ConfigError {
                    line,
                    directive: "}".into(),
                    message: "closes a block that was never opened".into(),
                });
            };
            let block = Item::Block { head, items };
            match stack.last_mut() {
                Some((_, parent)) => parent.push(block),
                None => top.push(block),
            }
            continue;
        }
        let opens = tokens.last() == Some(&"{");
        if opens {
            tokens.pop();
        }
        let Some((&name, values)) = tokens.split_first() else {
            return Err(ConfigError {
                line,
                directive: "{".into(),
                message: "block without a name".into(),
            });
        };
        if values.iter().any(|v| v.contains('{') || v.contains('}')) {
            return Err(ConfigError {
                line,
                directive: name.into(),
                message: "braces must end a line or stand alone".into(),
            });
        }
        let directive = Directive {
            line,
            name,
            values: values.to_vec(),
        };
        if opens {
            stack.push((directive, Vec::new()));
        } else {
            match stack.last_mut() {
                Some((_, parent)) => parent.push(Item::Directive(directive)),
                None => return Err(directive.error("directives must be inside a context block (service, logging, network, namespace)")),
            }
        }
    }
    if let Some((head, _)) = stack.pop() {
        return Err(head.error("block is never closed"));
    }
    Ok(top)
}

impl Config {
    /// Parses configuration text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config = Config {
            namespaces: Vec::new(),
            http_port: None,
            redis_port: None,
            redis_optional: false,
            ..Config::default()
        };
        let mut audit_file = None;
        for item in tree(text)? {
            match item {
                Item::Block { head, items } => match head.name {
                    "service" => config.service(&items)?,
                    "logging" => audit_file = config.logging(&items)?.or(audit_file),
                    "network" => config.network(&items)?,
                    "namespace" => {
                        let name = head.one()?;
                        if name.is_empty() || name.len() > bolide_types::NAMESPACE_NAME_BYTES_MAX {
                            return Err(head.error("namespace names are 1 to 31 bytes"));
                        }
                        if config.namespaces.iter().any(|ns| ns.name == name) {
                            return Err(head.error(format!("namespace '{name}' is defined twice")));
                        }
                        let namespace = namespace(name, &items)?;
                        config.namespaces.push(namespace);
                    }
                    "security" => {
                        if config.security.is_some() {
                            return Err(head.error("security is configured twice"));
                        }
                        config.security = Some(security::parse(&head, &items)?);
                    }
                    "mod-lua" | "xdr" => {
                        return Err(head.error("context is not supported by Bolide yet"))
                    }
                    _ => return Err(head.error("unknown context")),
                },
                Item::Directive(directive) => {
                    return Err(directive.error("directives must be inside a context block"))
                }
            }
        }
        if let Some(security) = &mut config.security {
            security.audit.file = audit_file;
        }
        if config.namespaces.is_empty() {
            return Err(ConfigError {
                line: 0,
                directive: "namespace".into(),
                message: "at least one namespace must be configured".into(),
            });
        }
        if let Some(name) = &config.redis_namespace {
            if !config
                .namespaces
                .iter()
                .any(|namespace| &namespace.name == name)
            {
                return Err(ConfigError {
                    line: 0,
                    directive: "network redis namespace".into(),
                    message: format!("no namespace {name} is configured"),
                });
            }
        }
        Ok(config)
    }

    fn service(&mut self, items: &[Item<'_>]) -> Result<(), ConfigError> {
        for directive in directives(items, "service")? {
            match directive.name {
                "cluster-name" => self.cluster_name = directive.one()?.to_owned(),
                "tls-refresh-period" => {
                    self.tls_refresh_period_seconds = tls::refresh_period(directive)?
                }
                "node-id" => {
                    let value = directive.one()?;
                    let id = u64::from_str_radix(value, 16)
                        .map_err(|_| directive.error(format!("'{value}' is not a hex node id")))?;
                    self.node_id = Some(id);
                }
                "service-threads" => {
                    self.service_threads = directive.number()?;
                    if self.service_threads == 0 || self.service_threads > 256 {
                        return Err(directive.error("service-threads must be 1 to 256"));
                    }
                }
                "proto-fd-max" => self.proto_fd_max = directive.number()?,
                "proto-fd-idle-ms" => self.proto_fd_idle_ms = directive.number()?,
                "proto-buffer-budget" => {
                    let bytes = directive.size()?;
                    if bytes < PROTO_BUFFER_BUDGET_MIN {
                        return Err(directive.error("proto-buffer-budget must be at least 1M"));
                    }
                    self.proto_buffer_budget_bytes = Some(bytes);
                }
                "ticker-interval" => {
                    self.ticker_interval_seconds = directive.number()?;
                    if !(1..=86_400).contains(&self.ticker_interval_seconds) {
                        return Err(directive.error("ticker-interval must be 1 to 86400 seconds"));
                    }
                }
                "pidfile" => self.pidfile = Some(PathBuf::from(directive.one()?)),
                "stop-writes-sys-memory-pct" => {
                    self.stop_writes_sys_memory_pct = directive.percent()?
                }
                "migrate-threads" => {
                    self.migrate_threads = directive.number()?;
                    if self.migrate_threads > 100 {
                        return Err(directive.error("migrate-threads must be 0 to 100"));
                    }
                }
                "migrate-max-num-incoming" => {
                    self.migrate_max_num_incoming = directive.number()?;
                    if self.migrate_max_num_incoming > 256 {
                        return Err(directive.error("migrate-max-num-incoming must be 0 to 256"));
                    }
                }
                "transaction-max-ms" => {
                    self.transaction_max_ms = directive.number()?;
                    if self.transaction_max_ms == 0 {
                        return Err(directive.error("transaction-max-ms must be at least 1"));
                    }
                }
                "min-cluster-size" => {
                    self.min_cluster_size = directive.number()?;
                    if self.min_cluster_size > bolide_cluster::CLUSTER_SIZE_MAX {
                        return Err(directive.error(format!(
                            "min-cluster-size must be 0 to {}",
                            bolide_cluster::CLUSTER_SIZE_MAX
                        )));
                    }
                }
                "work-directory" => self.work_directory = Some(PathBuf::from(directive.one()?)),
                "user" | "group" | "paxos-single-replica-limit" => {}
                _ => return Err(directive.error("unknown directive in service context")),
            }
        }
        Ok(())
    }

    /// Returns the audit trail's own file: a file sink whose only context
    /// is `audit`.
    fn logging(&mut self, items: &[Item<'_>]) -> Result<Option<PathBuf>, ConfigError> {
        let mut audit_file = None;
        for item in items {
            let Item::Block { head, items } = item else {
                let Item::Directive(directive) = item else {
                    continue;
                };
                return Err(
                    directive.error("expected 'console {' or 'file PATH {' in logging context")
                );
            };
            let sink_directives = directives(items, head.name)?;
            let audit_only = !sink_directives.is_empty()
                && sink_directives
                    .iter()
                    .all(|d| d.values.first().copied() == Some("audit"));
            match head.name {
                "console" if head.values.is_empty() => {}
                "file" if audit_only => audit_file = Some(PathBuf::from(head.one()?)),
                "file" => self.log_file = Some(PathBuf::from(head.one()?)),
                _ => {
                    return Err(head.error("unknown sink in logging context (console or file PATH)"))
                }
            }
            for directive in sink_directives {
                if directive.name != "context" || directive.values.len() != 2 {
                    return Err(directive.error("expected 'context NAME LEVEL'"));
                }
                let level = match directive.values.get(1).copied().unwrap_or("") {
                    "critical" | "warning" => "warn",
                    "info" => "info",
                    "debug" => "debug",
                    "detail" => "trace",
                    other => {
                        return Err(directive.error(format!(
                            "unknown level '{other}' (critical, warning, info, debug, detail)"
                        )))
                    }
                };
                // The audit context's level says only that audit lines go
                // to the sink, not how much the node logs.
                if directive.values.first().copied() != Some("audit") {
                    self.log_level = level.to_owned();
                }
            }
        }
        Ok(audit_file)
    }

    fn network(&mut self, items: &[Item<'_>]) -> Result<(), ConfigError> {
        // service { tls-port; tls-name; … }, checked once the whole network
        // context is read (the tls contexts may come after).
        let mut service_tls = tls::ServiceDirectives::new("service");
        let mut redis_tls = tls::ServiceDirectives::new("redis");
        let mut fabric_tls = tls::ClusterDirectives::default();
        let mut heartbeat_tls = tls::ClusterDirectives::default();
        for item in items {
            let Item::Block { head, items } = item else {
                let Item::Directive(directive) = item else {
                    continue;
                };
                return Err(directive.error(
                    "expected a sub-context (service, heartbeat, fabric, info, tls) in network",
                ));
            };
            if head.name == "heartbeat" {
                self.clustering = true;
            }
            if head.name == "tls" {
                let stanza = tls::stanza(head, items, &self.tls)?;
                self.tls.push(stanza);
                continue;
            }
            for directive in directives(items, head.name)? {
                if head.name == "service" && service_tls.take(directive)? {
                    continue;
                }
                if head.name == "redis" && redis_tls.take(directive)? {
                    continue;
                }
                if head.name == "fabric" && fabric_tls.take("fabric", directive)? {
                    continue;
                }
                if head.name == "heartbeat" && heartbeat_tls.take("heartbeat", directive)? {
                    continue;
                }
                match (head.name, directive.name) {
                    (
                        "info",
                        "tls-address"
                        | "tls-access-address"
                        | "tls-access-port"
                        | "tls-alternate-access-address"
                        | "tls-alternate-access-port"
                        | "tls-port"
                        | "tls-name"
                        | "tls-authenticate-client",
                    ) => {
                        return Err(directive.error(
                            "the info port has no TLS listener in Bolide; TLS clients use \
                             network service tls-port",
                        ));
                    }
                    ("service", "address") => self.service_address = address(directive)?,
                    ("service", "port") => self.service_port = directive.number()?,
                    ("service", "access-address") => {
                        self.access_address = Some(directive.one()?.to_owned())
                    }
                    ("heartbeat", "mode") => {
                        let mode = directive.one()?;
                        if mode != "mesh" {
                            return Err(directive.error("only 'mesh' heartbeat mode is supported"));
                        }
                        self.heartbeat_mode = mode.to_owned();
                    }
                    ("heartbeat", "port") => self.heartbeat_port = directive.number()?,
                    ("heartbeat", "address") => self.heartbeat_address = Some(address(directive)?),
                    ("heartbeat", "interval") => {
                        self.heartbeat_interval_ms = directive.number()?;
                        if !(50..=600_000).contains(&self.heartbeat_interval_ms) {
                            return Err(directive.error("interval must be 50 to 600000 ms"));
                        }
                    }
                    ("heartbeat", "timeout") => {
                        self.heartbeat_timeout = directive.number()?;
                        if self.heartbeat_timeout < 3 {
                            return Err(directive.error("timeout must be at least 3 intervals"));
                        }
                    }
                    ("heartbeat", "protocol") => {
                        if directive.one()? != "v3" {
                            return Err(directive.error("only heartbeat protocol v3 is supported"));
                        }
                    }
                    ("heartbeat", "test-clock-offset-ms") => {
                        self.test_clock_offset_ms = directive.number()?;
                        if self.test_clock_offset_ms.unsigned_abs() > 86_400_000 {
                            return Err(directive.error("test-clock-offset-ms is at most a day either way"));
                        }
                    }
                    ("heartbeat", "connect-timeout-ms") => {
                        directive.number::<u64>()?;
                    }
                    ("heartbeat", "mesh-seed-address-port") => {
                        let [host, port] = directive.values.as_slice() else {
                            return Err(
                                directive.error("expected 'mesh-seed-address-port HOST PORT'")
                            );
                        };
                        let port = port
                            .parse()
                            .map_err(|_| directive.error(format!("'{port}' is not a port")))?;
                        self.mesh_seeds.push(((*host).to_owned(), port));
                    }
                    ("fabric", "port") => self.fabric_port = directive.number()?,
                    ("fabric", "address") => self.fabric_address = Some(address(directive)?),
                    ("fabric", "latency-max-ms") => {
                        directive.number::<u64>()?;
                    }
                    ("info", "port") => self.info_port = Some(directive.number()?),
                    ("redis", "port") => self.redis_port = Some(directive.number()?),
                    ("redis", "address") => self.redis_address = address(directive)?,
                    ("redis", "namespace") => {
                        self.redis_namespace = Some(directive.one()?.to_owned())
                    }
                    ("http", "port") => self.http_port = Some(directive.number()?),
                    ("http", "address") => self.http_address = address(directive)?,
                    ("info", "address") => {
                        address(directive)?;
                    }
                    ("service" | "heartbeat" | "fabric" | "info" | "http" | "redis", _) => {
                        return Err(directive.error(format!(
                            "unknown directive in network {} context",
                            head.name
                        )));
                    }
                    _ => return Err(head.error(
                        "unknown network sub-context (service, heartbeat, fabric, info, http, redis, tls)",
                    )),
                }
            }
        }
        self.service_tls = service_tls.finish(&self.tls)?;
        self.redis_tls = redis_tls.finish(&self.tls)?;
        self.fabric_tls = fabric_tls.finish("fabric", &self.tls)?;
        self.heartbeat_tls = heartbeat_tls.finish("heartbeat", &self.tls)?;
        if let Some(fabric) = &self.fabric_tls {
            self.fabric_port = fabric.port;
            if let Some(address) = fabric_tls.address {
                self.fabric_address = Some(address);
            }
        }
        if let Some(heartbeat) = &self.heartbeat_tls {
            self.heartbeat_port = heartbeat.port;
            if let Some(address) = heartbeat_tls.address {
                self.heartbeat_address = Some(address);
            }
            self.mesh_seeds = heartbeat_tls
                .tls_seeds
                .iter()
                .map(|(host, port, _)| (host.clone(), *port))
                .collect();
        }
        Ok(())
    }
}

fn address(directive: &Directive<'_>) -> Result<IpAddr, ConfigError> {
    match directive.one()? {
        "any" => Ok(IpAddr::from([0, 0, 0, 0])),
        "localhost" => Ok(IpAddr::from([127, 0, 0, 1])),
        other => other
            .parse()
            .map_err(|_| directive.error(format!("'{other}' is not an IP address (or 'any')"))),
    }
}

/// The plain directives of a block; a nested block is an error.
fn directives<'i, 't>(
    items: &'i [Item<'t>],
    context: &str,
) -> Result<Vec<&'i Directive<'t>>, ConfigError> {
    items
        .iter()
        .map(|item| match item {
            Item::Directive(directive) => Ok(directive),
            Item::Block { head, .. } => {
                Err(head.error(format!("unexpected block inside {context}")))
            }
        })
        .collect()
}

fn namespace(name: &str, items: &[Item<'_>]) -> Result<NamespaceConfig, ConfigError> {
    let mut config = NamespaceConfig::with_name(name);
    // Directives strong consistency refuses, named once the whole block
    // is read (they may come before `strong-consistency true`).
    let mut not_with_sc: Option<ConfigError> = None;
    for item in items {
        let directive = match item {
            Item::Directive(directive) => directive,
            Item::Block { head, items } => {
                if head.name != "storage-engine" {
                    return Err(head.error("unknown block in namespace context"));
                }
                storage_engine(&mut config, head, items)?;
                continue;
            }
        };
        match directive.name {
            "replication-factor" => {
                config.replication_factor = directive.number()?;
                if !(1..=8).contains(&config.replication_factor) {
                    return Err(directive.error("replication-factor must be 1 to 8"));
                }
            }
            "conflict-resolution-policy" => {
                config.conflict_resolution_last_update_time = match directive.one()? {
                    "generation" => false,
                    "last-update-time" => true,
                    other => {
                        return Err(directive.error(format!(
                            "'{other}' is not a conflict-resolution-policy (generation, last-update-time)"
                        )))
                    }
                }
            }
            "write-commit-level-override" => {
                not_with_sc = Some(directive.error(
                    "write-commit-level-override is not applicable with strong-consistency",
                ));
                config.write_commit_level_master = match directive.one()? {
                    "all" | "off" => false,
                    "master" => true,
                    other => {
                        return Err(directive.error(format!(
                            "'{other}' is not a write-commit-level-override (all, master, off)"
                        )))
                    }
                }
            }
            "read-consistency-level-override" => match directive.one()? {
                "all" | "one" | "off" => {}
                other => {
                    return Err(directive.error(format!(
                        "'{other}' is not a read-consistency-level-override (all, one, off)"
                    )))
                }
            },
            "tomb-raider-eligible-age" => {
                config.tomb_raider_eligible_age_seconds = directive.seconds()?
            }
            "migrate-sleep" => config.migrate_sleep_us = directive.number()?,
            "strong-consistency" => config.strong_consistency = directive.boolean()?,
            "rack-id" => {
                let rack: u32 = directive.number()?;
                if rack > bolide_cluster::sc::RACK_ID_MAX {
                    return Err(directive.error(format!(
                        "rack-id must be 0 to {}",
                        bolide_cluster::sc::RACK_ID_MAX
                    )));
                }
                config.rack_id = rack;
            }
            "strong-consistency-allow-expunge" => {
                config.strong_consistency_allow_expunge = directive.boolean()?
            }
            "auto-revive" => config.auto_revive = directive.boolean()?,
            "migrate-order" => {
                let order: u32 = directive.number()?;
                if !(1..=10).contains(&order) {
                    return Err(directive.error("migrate-order must be 1 to 10"));
                }
            }
            "default-ttl" => config.default_ttl_seconds = directive.seconds()?,
            "nsup-period" => config.nsup_period_seconds = directive.seconds()?,
            "allow-ttl-without-nsup" => config.allow_ttl_without_nsup = directive.boolean()?,
            "max-record-size" => {
                let size = directive.size()?;
                if size == 0 || size > bolide_types::PROTO_BODY_BYTES_MAX {
                    return Err(directive.error("max-record-size must be between 1 byte and 128M"));
                }
                config.max_record_size_bytes = size as usize;
            }
            "memory-size" => config.memory_size_bytes = directive.size()?,
            "high-water-memory-pct" | "evict-used-pct" => {
                config.evict_used_percent = directive.percent()?
            }
            "stop-writes-pct" | "stop-writes-used-pct" => {
                config.stop_writes_used_percent = directive.percent()?
            }
            "evict-tenths-pct" => config.evict_tenths_percent = directive.number()?,
            "storage-engine" => match directive.one()? {
                "memory" => config.storage_engine = StorageEngine::Memory,
                "device" => {
                    return Err(directive
                        .error("storage-engine device needs a block with at least one file"))
                }
                other => {
                    return Err(directive.error(format!(
                        "storage-engine '{other}' is not supported (memory and device are)"
                    )))
                }
            },
            _ => {
                return Err(
                    directive.error(format!("unknown directive in namespace {name} context"))
                )
            }
        }
    }
    if config.strong_consistency {
        if let Some(error) = not_with_sc {
            return Err(error);
        }
    }
    Ok(config)
}

fn storage_engine(
    config: &mut NamespaceConfig,
    head: &Directive<'_>,
    items: &[Item<'_>],
) -> Result<(), ConfigError> {
    let engine = match head.one()? {
        "memory" => StorageEngine::Memory,
        "device" => StorageEngine::Device,
        other => {
            return Err(head.error(format!(
                "storage-engine '{other}' is not supported (memory and device are)"
            )))
        }
    };
    config.storage_engine = engine;
    let context = match engine {
        StorageEngine::Memory => "storage-engine memory",
        StorageEngine::Device => "storage-engine device",
    };
    let mut device = DeviceConfig::new(Vec::new(), 0);
    let mut compression_line = None;
    for directive in directives(items, context)? {
        match (engine, directive.name) {
            (_, "file" | "device") => device.files.push(PathBuf::from(directive.one()?)),
            (_, "filesize") => device.file_size = directive.size()?,
            (_, "write-block-size") => {
                let size = directive.size()?;
                let range = u64::from(WRITE_BLOCK_MIN)..=u64::from(WRITE_BLOCK_MAX);
                if !range.contains(&size) || !size.is_power_of_two() {
                    return Err(
                        directive.error("write-block-size must be a power of two from 4K to 8M")
                    );
                }
                device.write_block_size = size as u32;
            }
            (_, "flush-max-ms") => {
                device.flush_max_ms = directive.number()?;
                if device.flush_max_ms == 0 {
                    return Err(directive.error("flush-max-ms must be at least 1"));
                }
            }
            (_, "commit-to-device") => device.commit_to_device = directive.boolean()?,
            (_, "defrag-lwm-pct") => {
                device.defrag_lwm_pct = directive.percent()?;
                if !(1..=99).contains(&device.defrag_lwm_pct) {
                    return Err(directive.error("defrag-lwm-pct must be 1 to 99"));
                }
            }
            (_, "defrag-sleep") => device.defrag_sleep_us = directive.number()?,
            (_, "min-avail-pct" | "stop-writes-avail-pct") => {
                device.min_avail_pct = directive.percent()?
            }
            (_, "max-write-cache") => device.max_write_cache = directive.size()?,
            (_, "compression") => {
                let name = directive.one()?;
                device.compression.method = Method::parse(name).ok_or_else(|| {
                    directive.error(format!(
                        "'{name}' is not a compression method (none, lz4, snappy or zstd)"
                    ))
                })?;
                compression_line = Some(directive.line);
            }
            (_, "compression-level") => {
                device.compression.level = directive.number()?;
                if !(1..=COMPRESSION_LEVEL_MAX).contains(&device.compression.level) {
                    return Err(directive.error(format!(
                        "compression-level must be 1 to {COMPRESSION_LEVEL_MAX} (zstd only)"
                    )));
                }
                compression_line = compression_line.or(Some(directive.line));
            }
            (_, "compression-acceleration") => {
                device.compression.acceleration = directive.number()?;
                if !(1..=COMPRESSION_ACCELERATION_MAX).contains(&device.compression.acceleration) {
                    return Err(directive.error(format!(
                        "compression-acceleration must be 1 to {COMPRESSION_ACCELERATION_MAX} (lz4 only)"
                    )));
                }
                compression_line = compression_line.or(Some(directive.line));
            }
            (StorageEngine::Device, "max-used-pct" | "stop-writes-used-pct") => {
                device.max_used_pct = directive.percent()?
            }
            (StorageEngine::Device, "evict-used-pct") => {
                config.evict_used_percent = directive.percent()?
            }
            (StorageEngine::Device, "data-in-memory") => {
                device.data_in_memory = directive.boolean()?
            }
            (StorageEngine::Memory, "data-size") => config.memory_size_bytes = directive.size()?,
            (StorageEngine::Memory, "stop-writes-used-pct") => {
                config.stop_writes_used_percent = directive.percent()?
            }
            (StorageEngine::Memory, "evict-used-pct") => {
                config.evict_used_percent = directive.percent()?
            }
            _ => return Err(directive.error(format!("unknown directive in {context} context"))),
        }
    }
    if engine == StorageEngine::Memory {
        // Persistence files behind a memory namespace: the data is in memory.
        device.data_in_memory = true;
    }
    if device.files.is_empty() {
        if engine == StorageEngine::Device {
            return Err(head.error("storage-engine device needs at least one file or device"));
        }
        if let Some(line) = compression_line {
            // Records are compressed where they are written to storage.
            return Err(ConfigError {
                line,
                directive: "compression".into(),
                message: "storage compression needs storage files (file or device lines)".into(),
            });
        }
        config.device = None;
        return Ok(());
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(duplicate) = device.files.iter().find(|path| !seen.insert(*path)) {
        return Err(head.error(format!("file {} is listed twice", duplicate.display())));
    }
    let needs_size = device.files.iter().any(|path| !path.starts_with("/dev/"));
    if needs_size && device.file_size == 0 {
        return Err(head.error(format!("{context} with a file needs filesize")));
    }
    config.device = Some(device);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "
service {
    cluster-name prod   # trailing comment
    node-id A1B2
}
logging {
    console {
        context any info
    }
}
network {
    service {
        address 127.0.0.1
        port 3100
    }
    heartbeat {
        mode mesh
        port 3102
        mesh-seed-address-port 10.0.0.48 3002
        interval 150
        timeout 10
    }
    fabric {
        port 3101
    }
    info {
        port 3103
    }
}
namespace test {
    replication-factor 2
    default-ttl 30d
    nsup-period 1
    max-record-size 128K
    storage-engine memory {
        data-size 4G
        stop-writes-used-pct 80
        evict-used-pct 60
    }
}
namespace legacy {
    memory-size 1G
    high-water-memory-pct 60
    stop-writes-pct 90
}
";

    #[test]
    fn parses_the_supported_subset() {
        let config = Config::parse(FULL).expect("valid");
        assert_eq!(config.cluster_name, "prod");
        assert_eq!(config.node_id, Some(0xA1B2));
        assert_eq!(config.service_port, 3100);
        assert_eq!(config.info_port, Some(3103));
        assert_eq!(config.mesh_seeds, vec![("10.0.0.48".to_owned(), 3002)]);
        let test = &config.namespaces[0];
        assert_eq!(test.replication_factor, 2);
        assert_eq!(test.default_ttl_seconds, 30 * 86_400);
        assert_eq!(test.max_record_size_bytes, 128 * 1024);
        assert_eq!(test.memory_size_bytes, 4 << 30);
        assert_eq!(test.stop_writes_used_percent, 80);
        assert_eq!(test.evict_used_percent, 60);
        let legacy = &config.namespaces[1];
        assert_eq!(legacy.memory_size_bytes, 1 << 30);
        assert_eq!(
            (legacy.evict_used_percent, legacy.stop_writes_used_percent),
            (60, 90)
        );
    }

    #[test]
    fn proto_buffer_budget_takes_a_size_of_at_least_one_mebibyte() {
        let with = |value: &str| {
            Config::parse(&format!(
                "service {{\n    proto-buffer-budget {value}\n}}\nnamespace test {{\n}}\n"
            ))
        };
        assert_eq!(
            Config::parse("namespace test {\n}\n")
                .expect("valid")
                .proto_buffer_budget_bytes,
            None
        );
        assert_eq!(
            with("64M").expect("valid").proto_buffer_budget_bytes,
            Some(64 << 20)
        );
        assert_eq!(
            with("1G").expect("valid").proto_buffer_budget_bytes,
            Some(1 << 30)
        );
        let error = with("512K").expect_err("too small");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "proto-buffer-budget")
        );
        assert!(with("lots").is_err());
    }

    #[test]
    fn strong_consistency_directives() {
        let config = Config::parse(
            "namespace test {\n    replication-factor 2\n    strong-consistency true\n    strong-consistency-allow-expunge true\n}\n",
        )
        .expect("valid");
        let ns = &config.namespaces[0];
        assert!(ns.strong_consistency && ns.strong_consistency_allow_expunge);
        let config =
            Config::parse("namespace test {\n    replication-factor 2\n}\n").expect("valid");
        assert!(!config.namespaces[0].strong_consistency);
        let error = Config::parse("namespace test {\n    strong-consistency maybe\n}\n")
            .expect_err("invalid");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "strong-consistency")
        );
        let error = Config::parse(
            "namespace test {\n    write-commit-level-override master\n    strong-consistency true\n}\n",
        )
        .expect_err("invalid");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "write-commit-level-override")
        );
    }

    #[test]
    fn rack_id_takes_0_to_a_million() {
        let config = Config::parse("namespace test {\n    rack-id 1000000\n}\n").expect("valid");
        assert_eq!(config.namespaces[0].rack_id, 1_000_000);
        let config =
            Config::parse("namespace test {\n    replication-factor 2\n}\n").expect("valid");
        assert_eq!(config.namespaces[0].rack_id, 0);
        for bad in ["1000001", "-1", "east", "1 2"] {
            let text =
                format!("namespace test {{\n    replication-factor 2\n    rack-id {bad}\n}}\n");
            let error = Config::parse(&text).expect_err(bad);
            assert_eq!(
                (error.line, error.directive.as_str()),
                (3, "rack-id"),
                "{bad}"
            );
        }
    }

    #[test]
    fn errors_name_line_and_directive() {
        let error =
            Config::parse("namespace test {\n    replication-factor 1\n    bogus-thing 5\n}\n")
                .expect_err("invalid");
        assert_eq!((error.line, error.directive.as_str()), (3, "bogus-thing"));
        assert!(error.to_string().contains("line 3"));
        let error =
            Config::parse("namespace test {\n    default-ttl forever\n}\n").expect_err("invalid");
        assert_eq!((error.line, error.directive.as_str()), (2, "default-ttl"));
        let error = Config::parse("namespace test {\n").expect_err("unclosed");
        assert_eq!(error.line, 1);
        let error = Config::parse("service {\n}\n}\n").expect_err("extra brace");
        assert_eq!(error.line, 3);
        let error = Config::parse("namespace test {\n storage-engine device {\n file /x\n }\n}\n")
            .expect_err("device");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "storage-engine")
        );
        assert!(Config::parse("service {\n}\n").is_err(), "no namespace");
        let error = Config::parse("namespace t {\n stop-writes-pct 120\n}\n").expect_err("percent");
        assert_eq!(error.line, 2);
    }

    #[test]
    fn tls_contexts_and_the_service_listener() {
        let text = |service: &str, tls: &str| {
            format!(
                "network {{\n    tls main {{\n{tls}    }}\n    tls other {{\n        cert-file /o.pem\n        key-file /o.key\n    }}\n    service {{\n        port 3000\n{service}    }}\n}}\nnamespace test {{\n}}\n"
            )
        };
        let stanza = "        cert-file /etc/bolide/cert.pem\n        key-file /etc/bolide/key.pem\n        ca-file /etc/bolide/ca.pem\n        protocols -all +TLSv1.2 +TLSv1.3\n        cipher-suite ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_128_GCM_SHA256\n        cert-blacklist /etc/bolide/revoked\n";
        let listener = "        tls-port 4333\n        tls-address 127.0.0.1\n        tls-access-address db.example.com\n        tls-access-port 14333\n        tls-name main\n        tls-authenticate-client client-a client-b\n        tls-authenticate-client client-c\n";
        let config = Config::parse(&text(listener, stanza)).expect("valid");
        assert_eq!(config.tls.len(), 2);
        let main = &config.tls[0];
        assert_eq!(main.name, "main");
        assert_eq!(main.cert_file, PathBuf::from("/etc/bolide/cert.pem"));
        assert_eq!(main.ca_file, Some(PathBuf::from("/etc/bolide/ca.pem")));
        assert_eq!(
            main.protocols,
            Protocols {
                tls12: true,
                tls13: true
            }
        );
        assert_eq!(main.cipher_suites.len(), 2);
        assert_eq!(
            main.cert_blacklist,
            Some(PathBuf::from("/etc/bolide/revoked"))
        );
        assert_eq!(config.tls[1].protocols, Protocols::default());
        assert_eq!(
            config.service_tls,
            Some(ServiceTls {
                port: 4333,
                address: Some(IpAddr::from([127, 0, 0, 1])),
                access_address: Some("db.example.com".into()),
                access_port: Some(14333),
                name: "main".into(),
                authenticate_client: ClientAuth::Names(vec![
                    "client-a".into(),
                    "client-b".into(),
                    "client-c".into()
                ]),
            })
        );
        assert_eq!(
            config.tls_refresh_period_seconds,
            TLS_REFRESH_PERIOD_SECONDS_DEFAULT
        );
        // A context alone opens no listener.
        assert_eq!(
            Config::parse(&text("", stanza)).expect("valid").service_tls,
            None
        );
        let auth = |value: &str| {
            Config::parse(&text(
                &format!("        tls-port 4333\n        tls-name main\n{value}"),
                stanza,
            ))
            .map(|config| config.service_tls.expect("listener").authenticate_client)
        };
        assert_eq!(auth(""), Ok(ClientAuth::Any));
        assert_eq!(
            auth("        tls-authenticate-client any\n"),
            Ok(ClientAuth::Any)
        );
        assert_eq!(
            auth("        tls-authenticate-client false\n"),
            Ok(ClientAuth::Off)
        );
        let error = auth("        tls-authenticate-client any client-a\n").expect_err("mixed");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (18, "tls-authenticate-client")
        );
        let error_of =
            |service: &str, tls: &str| Config::parse(&text(service, tls)).expect_err("invalid");
        // Client certificates (the default) need the CA that signs them.
        let error = error_of("        tls-port 4333\n        tls-name other\n", stanza);
        assert_eq!((error.line, error.directive.as_str()), (16, "tls-port"));
        assert!(error.message.contains("ca-file"), "{error}");
        let error = error_of("        tls-port 4333\n        tls-name nothing\n", stanza);
        assert_eq!((error.line, error.directive.as_str()), (17, "tls-name"));
        let error = error_of("        tls-port 4333\n", stanza);
        assert!(error.message.contains("needs tls-name"), "{error}");
        let error = error_of("        tls-alternate-access-port 3\n", stanza);
        assert_eq!(error.directive, "tls-alternate-access-port");
        for (directive, message) in [
            ("protocols TLSv1.1", "not supported"),
            ("protocols TLSv7", "unknown protocol"),
            ("cipher-suite HIGH:!aNULL", "OpenSSL keywords"),
            ("key-file-password env:PASS", "decrypt"),
            ("colour blue", "unknown directive"),
        ] {
            let error = error_of(
                "",
                &format!(
                    "        cert-file /c.pem\n        key-file /k.pem\n        {directive}\n"
                ),
            );
            assert_eq!(error.line, 5, "{directive}");
            assert!(error.message.contains(message), "{directive}: {error}");
        }
        let error = error_of("", "        cert-file /c.pem\n");
        assert_eq!((error.line, error.directive.as_str()), (2, "tls"));
        assert!(error.message.contains("key-file"), "{error}");
        let error = Config::parse(
            "network {\n    heartbeat {\n        mode mesh\n        tls-port 3012\n    }\n}\nnamespace test {\n}\n",
        )
        .expect_err("heartbeat tls");
        assert_eq!((error.line, error.directive.as_str()), (4, "tls-port"));
        let config =
            Config::parse("service {\n    tls-refresh-period 10m\n}\nnamespace test {\n}\n")
                .expect("valid");
        assert_eq!(config.tls_refresh_period_seconds, 600);
        let error = Config::parse("service {\n    tls-refresh-period 0\n}\nnamespace test {\n}\n")
            .expect_err("zero");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "tls-refresh-period")
        );
    }

    #[test]
    fn fabric_and_heartbeat_over_tls() {
        let text = |fabric: &str, heartbeat: &str| {
            format!(
                "network {{\n    tls cluster {{\n        cert-file /n.pem\n        key-file /n.key\n        ca-file /ca.pem\n    }}\n    tls bare {{\n        cert-file /n.pem\n        key-file /n.key\n    }}\n    fabric {{\n{fabric}    }}\n    heartbeat {{\n        mode mesh\n{heartbeat}    }}\n}}\nnamespace test {{\n}}\n"
            )
        };
        let fabric =
            "        tls-port 3011\n        tls-address 127.0.0.2\n        tls-name cluster\n";
        let heartbeat = "        tls-port 3012\n        tls-name cluster\n        tls-mesh-seed-address-port 10.0.0.1 3012\n        tls-mesh-seed-address-port db2 3012\n";
        let config = Config::parse(&text(fabric, heartbeat)).expect("valid");
        assert_eq!(
            config.fabric_tls,
            Some(ClusterTls {
                port: 3011,
                name: "cluster".into()
            })
        );
        assert_eq!(config.fabric_port, 3011);
        assert_eq!(config.fabric_address, Some(IpAddr::from([127, 0, 0, 2])));
        assert_eq!(config.heartbeat_port, 3012);
        assert_eq!(
            config.heartbeat_tls.as_ref().map(|tls| tls.name.as_str()),
            Some("cluster")
        );
        assert_eq!(
            config.mesh_seeds,
            [("10.0.0.1".to_owned(), 3012), ("db2".to_owned(), 3012)]
        );
        assert!(config.clustering);
        let error_of = |fabric: &str, heartbeat: &str| {
            Config::parse(&text(fabric, heartbeat)).expect_err("invalid")
        };
        // tls-name naming no context: its line and directive.
        let error = error_of("        tls-port 3011\n        tls-name nowhere\n", "");
        assert_eq!((error.line, error.directive.as_str()), (13, "tls-name"));
        assert!(error.message.contains("no 'tls nowhere"), "{error}");
        // A context without a CA cannot check the other nodes.
        let error = error_of("        tls-port 3011\n        tls-name bare\n", "");
        assert_eq!((error.line, error.directive.as_str()), (12, "tls-port"));
        assert!(error.message.contains("ca-file"), "{error}");
        let error = error_of("        tls-port 3011\n", "");
        assert!(error.message.contains("needs tls-name"), "{error}");
        // TLS only: no plain port beside it, no plain seeds.
        let error = error_of(
            "        port 3001\n        tls-port 3011\n        tls-name cluster\n",
            "",
        );
        assert_eq!((error.line, error.directive.as_str()), (12, "port"));
        let error = error_of(
            "",
            "        tls-port 3012\n        tls-name cluster\n        mesh-seed-address-port a 3002\n",
        );
        assert_eq!(error.directive, "mesh-seed-address-port");
        let error = error_of("", "        tls-mesh-seed-address-port a 3012\n");
        assert!(error.message.contains("needs tls-port"), "{error}");
        let error = error_of("        tls-authenticate-client any\n", "");
        assert!(error.message.contains("always mutual"), "{error}");
    }

    #[test]
    fn http_is_off_unless_configured_and_on_without_a_file() {
        assert_eq!(Config::default().http_port, Some(DEFAULT_HTTP_PORT));
        assert_eq!(Config::default().http_address, IpAddr::from([127, 0, 0, 1]));
        let config = Config::parse("namespace test {\n}\n").expect("valid");
        assert_eq!(config.http_port, None);
        assert_eq!(config.ticker_interval_seconds, 10);
        let config = Config::parse(
            "service {\n ticker-interval 2\n}\nnetwork {\n http {\n  address any\n  port 9145\n }\n}\nnamespace test {\n}\n",
        )
        .expect("valid");
        assert_eq!(config.http_port, Some(9145));
        assert_eq!(config.http_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(config.ticker_interval_seconds, 2);
        let error = Config::parse("network {\n http {\n  prot 1\n }\n}\nnamespace test {\n}\n")
            .expect_err("typo");
        assert_eq!((error.line, error.directive.as_str()), (3, "prot"));
        let error = Config::parse("service {\n ticker-interval 0\n}\nnamespace test {\n}\n")
            .expect_err("zero");
        assert_eq!(
            (error.line, error.directive.as_str()),
            (2, "ticker-interval")
        );
    }
}
