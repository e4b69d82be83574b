//! TLS in the configuration, as Aerospike spells it:
//!
//! ```text
//! network {
//!     tls cluster-a {                       # up to 10 named contexts
//!         cert-file /etc/bolide/tls/node.pem
//!         key-file /etc/bolide/tls/node.key
//!         ca-file /etc/bolide/tls/ca.pem    # and/or ca-path DIR
//!         protocols TLSv1.2                 # default; "TLSv1.2 TLSv1.3", "-all +TLSv1.3"
//!         cipher-suite ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256
//!         cert-blacklist /etc/bolide/tls/revoked.txt
//!     }
//!     service {
//!         tls-port 4333
//!         tls-address any                   # default: the service address
//!         tls-access-address 10.0.0.5       # what service-tls-std advertises
//!         tls-access-port 4333
//!         tls-name cluster-a
//!         tls-authenticate-client any       # default; false; or names (repeatable)
//!     }
//! }
//! service { tls-refresh-period 1h }         # re-read certificates and keys
//! ```

use super::{directives, ConfigError, Directive, Item};
use crate::net::tls::{cipher_suite, ClientAuth, Protocols, TlsSettings};
use std::net::IpAddr;
use std::path::PathBuf;

/// Aerospike's limit on `tls` stanzas (`MAX_TLS_SPECS`).
pub const TLS_STANZAS_MAX: usize = 10;

/// How often certificates and keys are read again unless configured.
pub const TLS_REFRESH_PERIOD_SECONDS_DEFAULT: u32 = 86_400;

/// The service's TLS listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTls {
    pub port: u16,
    /// Where it listens (`tls-address`; None: the service address).
    pub address: Option<IpAddr>,
    /// What `service-tls-std` advertises (`tls-access-address`,
    /// `tls-access-port`; None: the service's access address, the port).
    pub access_address: Option<String>,
    pub access_port: Option<u16>,
    /// The `tls` stanza it presents, and the name clients verify.
    pub name: String,
    pub authenticate_client: ClientAuth,
}

/// `tls NAME { … }`.
pub(super) fn stanza(
    head: &Directive<'_>,
    items: &[Item<'_>],
    defined: &[TlsSettings],
) -> Result<TlsSettings, ConfigError> {
    let name = head.one()?;
    if defined.iter().any(|spec| spec.name == name) {
        return Err(head.error(format!("tls '{name}' is defined twice")));
    }
    if defined.len() >= TLS_STANZAS_MAX {
        return Err(head.error(format!("at most {TLS_STANZAS_MAX} tls contexts")));
    }
    let mut cert_file = None;
    let mut key_file = None;
    let mut settings = TlsSettings::new(name, "".as_ref(), "".as_ref());
    for directive in directives(items, "tls")? {
        match directive.name {
            "cert-file" => cert_file = Some(PathBuf::from(directive.one()?)),
            "key-file" => key_file = Some(PathBuf::from(directive.one()?)),
            "ca-file" => settings.ca_file = Some(PathBuf::from(directive.one()?)),
            "ca-path" => settings.ca_path = Some(PathBuf::from(directive.one()?)),
            "cert-blacklist" => settings.cert_blacklist = Some(PathBuf::from(directive.one()?)),
            "protocols" => {
                settings.protocols = Protocols::parse(&directive.values)
                    .map_err(|message| directive.error(message))?
            }
            "cipher-suite" => {
                let names: Vec<String> = directive
                    .values
                    .iter()
                    .flat_map(|value| value.split([':', ',']))
                    .filter(|name| !name.is_empty())
                    .map(str::to_owned)
                    .collect();
                if names.is_empty() {
                    return Err(directive.error("expects one or more cipher suites"));
                }
                for name in &names {
                    cipher_suite(name).map_err(|message| directive.error(message))?;
                }
                settings.cipher_suites = names;
            }
            "key-file-password" => {
                return Err(directive.error(
                    "encrypted keys are not supported by Bolide: decrypt the key \
                     (openssl pkey -in KEY -out PLAIN) and keep it readable by the node only",
                ))
            }
            "pki-user-append-ou" => {
                return Err(directive.error(
                    "not supported by Bolide: PKI login takes the user name from the client \
                     certificate's common name alone",
                ))
            }
            _ => return Err(directive.error("unknown directive in tls context")),
        }
    }
    let (Some(cert_file), Some(key_file)) = (cert_file, key_file) else {
        return Err(head.error("a tls context needs cert-file and key-file"));
    };
    settings.cert_file = cert_file;
    settings.key_file = key_file;
    Ok(settings)
}

/// The `tls-*` directives of `network { service { } }` (or `network {
/// redis { } }`), checked together once the network context is read.
#[derive(Default)]
pub(super) struct ServiceDirectives<'d, 't> {
    /// `service` or `redis`, for the messages; the Redis port advertises
    /// no access address.
    block: &'static str,
    port: Option<(u16, &'d Directive<'t>)>,
    address: Option<IpAddr>,
    access_address: Option<String>,
    access_port: Option<u16>,
    name: Option<(&'d str, &'d Directive<'t>)>,
    authenticate: Vec<&'d Directive<'t>>,
}

impl<'d, 't> ServiceDirectives<'d, 't> {
    pub(super) fn new(block: &'static str) -> ServiceDirectives<'d, 't> {
        ServiceDirectives {
            block,
            ..ServiceDirectives::default()
        }
    }

    /// Takes `directive` if it is one of the listener's TLS directives.
    pub(super) fn take(&mut self, directive: &'d Directive<'t>) -> Result<bool, ConfigError> {
        if self.block == "redis"
            && matches!(
                directive.name,
                "tls-access-address"
                    | "tls-access-port"
                    | "tls-alternate-access-address"
                    | "tls-alternate-access-port"
            )
        {
            return Err(directive.error("not supported in network redis"));
        }
        match directive.name {
            "tls-port" => self.port = Some((directive.number()?, directive)),
            "tls-address" => self.address = Some(super::address(directive)?),
            "tls-access-address" => self.access_address = Some(directive.one()?.to_owned()),
            "tls-access-port" => self.access_port = Some(directive.number()?),
            "tls-name" => self.name = Some((directive.one()?, directive)),
            "tls-authenticate-client" => self.authenticate.push(directive),
            "tls-alternate-access-address" | "tls-alternate-access-port" => {
                return Err(directive.error(
                    "not supported by Bolide (no alternate addresses): use tls-access-address",
                ))
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub(super) fn finish(self, stanzas: &[TlsSettings]) -> Result<Option<ServiceTls>, ConfigError> {
        let block = self.block;
        let authenticate_client = authenticate_client(&self.authenticate)?;
        let (port, port_directive, name) = match (self.port, self.name) {
            (None, None) => {
                if let Some(directive) = self.authenticate.first() {
                    return Err(
                        directive.error(format!("needs tls-port and tls-name in network {block}"))
                    );
                }
                return Ok(None);
            }
            (Some((_, directive)), None) => {
                return Err(directive.error("needs tls-name (the tls context to present)"))
            }
            (None, Some((_, directive))) => {
                return Err(directive.error(format!("needs tls-port in network {block}")))
            }
            (Some((port, port_directive)), Some(name)) => (port, port_directive, name),
        };
        let (name, name_directive) = name;
        let Some(stanza) = stanzas.iter().find(|spec| spec.name == name) else {
            return Err(name_directive.error(format!("no 'tls {name} {{ … }}' context in network")));
        };
        if authenticate_client != ClientAuth::Off && !stanza.has_ca() {
            return Err(port_directive.error(format!(
                "clients must present certificates (tls-authenticate-client is {}), so tls {name} \
                 needs ca-file or ca-path; or set 'tls-authenticate-client false' for standard TLS",
                if self.authenticate.is_empty() {
                    "any by default"
                } else {
                    "any or names"
                }
            )));
        }
        Ok(Some(ServiceTls {
            port,
            address: self.address,
            access_address: self.access_address,
            access_port: self.access_port,
            name: name.to_owned(),
            authenticate_client,
        }))
    }
}

/// `tls-authenticate-client` lines: none (any), `any`, `false`, or names
/// (one or more per line, repeatable); `any` and `false` stand alone.
fn authenticate_client(directives: &[&Directive<'_>]) -> Result<ClientAuth, ConfigError> {
    let mut names = Vec::new();
    let mut keyword = None;
    for directive in directives {
        if directive.values.is_empty() {
            return Err(directive.error("expects any, false, or certificate names"));
        }
        for value in &directive.values {
            match *value {
                "any" | "false" => {
                    if keyword.is_some() || !names.is_empty() || directive.values.len() > 1 {
                        return Err(directive
                            .error("'any' and 'false' cannot be combined with other values"));
                    }
                    keyword = Some(*value);
                }
                name => {
                    if keyword.is_some() {
                        return Err(directive
                            .error("'any' and 'false' cannot be combined with other values"));
                    }
                    names.push(name.to_owned());
                }
            }
        }
    }
    Ok(match keyword {
        Some("false") => ClientAuth::Off,
        Some(_) => ClientAuth::Any,
        None if names.is_empty() => ClientAuth::Any,
        None => ClientAuth::Names(names),
    })
}

/// `service { tls-refresh-period }`: at least a second.
pub(super) fn refresh_period(directive: &Directive<'_>) -> Result<u32, ConfigError> {
    let seconds = directive.seconds()?;
    if seconds == 0 {
        return Err(directive.error("tls-refresh-period must be at least 1 second"));
    }
    Ok(seconds)
}

/// `fabric { tls-port; tls-name; tls-address }` or `heartbeat { tls-port;
/// tls-name; tls-address; tls-mesh-seed-address-port }`: the connections
/// between nodes over TLS, mutual both ways (each side presents its
/// certificate and checks the other's against the context's CA and the
/// tls-name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterTls {
    pub port: u16,
    /// The `tls` stanza; its name is also the name every node's
    /// certificate must carry (CN or DNS SAN).
    pub name: String,
}

/// The `tls-*` directives of `network { fabric { } }` or `network {
/// heartbeat { } }`, checked once the network context is read.
#[derive(Default)]
pub(super) struct ClusterDirectives<'d, 't> {
    port: Option<(u16, &'d Directive<'t>)>,
    pub(super) address: Option<IpAddr>,
    name: Option<(&'d str, &'d Directive<'t>)>,
    plain_port: Option<&'d Directive<'t>>,
    pub(super) tls_seeds: Vec<(String, u16, &'d Directive<'t>)>,
    plain_seeds: Vec<&'d Directive<'t>>,
}

impl<'d, 't> ClusterDirectives<'d, 't> {
    /// Takes `directive` if it is one of the TLS directives of `block`
    /// (`fabric` or `heartbeat`); notes the plain `port` and mesh seeds,
    /// which a TLS-only block refuses.
    pub(super) fn take(
        &mut self,
        block: &str,
        directive: &'d Directive<'t>,
    ) -> Result<bool, ConfigError> {
        match directive.name {
            "tls-port" => self.port = Some((directive.number()?, directive)),
            "tls-address" => self.address = Some(super::address(directive)?),
            "tls-name" => self.name = Some((directive.one()?, directive)),
            "tls-mesh-seed-address-port" if block == "heartbeat" => {
                let [host, port] = directive.values.as_slice() else {
                    return Err(directive.error("expected 'tls-mesh-seed-address-port HOST PORT'"));
                };
                let port = port
                    .parse()
                    .map_err(|_| directive.error(format!("'{port}' is not a port")))?;
                self.tls_seeds.push(((*host).to_owned(), port, directive));
            }
            "tls-authenticate-client" => {
                return Err(directive.error(format!(
                    "not a {block} directive: between nodes TLS is always mutual (each node \
                     presents its certificate and checks the other's)"
                )))
            }
            "tls-access-address"
            | "tls-access-port"
            | "tls-alternate-access-address"
            | "tls-alternate-access-port" => {
                return Err(directive.error(format!("not supported in network {block}")))
            }
            "port" => {
                self.plain_port = Some(directive);
                return Ok(false);
            }
            "mesh-seed-address-port" => {
                self.plain_seeds.push(directive);
                return Ok(false);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub(super) fn finish(
        &self,
        block: &str,
        stanzas: &[TlsSettings],
    ) -> Result<Option<ClusterTls>, ConfigError> {
        let (port, port_directive, name) = match (self.port, self.name) {
            (None, None) => {
                if let Some((_, _, directive)) = self.tls_seeds.first() {
                    return Err(directive.error(
                        "needs tls-port and tls-name in network heartbeat (TLS heartbeats)",
                    ));
                }
                return Ok(None);
            }
            (Some((_, directive)), None) => {
                return Err(directive.error("needs tls-name (the tls context to use)"))
            }
            (None, Some((_, directive))) => {
                return Err(directive.error(format!("needs tls-port in network {block}")))
            }
            (Some((port, directive)), Some(name)) => (port, directive, name),
        };
        let (name, name_directive) = name;
        let Some(stanza) = stanzas.iter().find(|spec| spec.name == name) else {
            return Err(name_directive.error(format!(
                "no 'tls {name} {{ … }}' context in network (network {block} tls-name)"
            )));
        };
        if !stanza.has_ca() {
            return Err(port_directive.error(format!(
                "TLS between nodes is mutual: tls {name} needs ca-file or ca-path (the CA that \
                 signs every node's certificate)"
            )));
        }
        if let Some(directive) = self.plain_port {
            return Err(directive.error(format!(
                "network {block} has tls-port: its connections are TLS only, so no plain port \
                 (remove 'port')"
            )));
        }
        if let Some(directive) = self.plain_seeds.first() {
            return Err(directive.error(
                "heartbeats are TLS (tls-port): name seeds with tls-mesh-seed-address-port",
            ));
        }
        Ok(Some(ClusterTls {
            port,
            name: name.to_owned(),
        }))
    }
}
