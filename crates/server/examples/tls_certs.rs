//! Writes a throwaway PKI for TLS tests into a directory, made fresh each
//! time (no key is ever committed):
//!
//!     cargo run -p bolide-server --example tls_certs -- DIR [NODE-NAME]
//!
//! ```text
//!  ca.pem                    the cluster's CA
//!  node.pem / node.key       a node: CN and DNS SAN = NODE-NAME (default bolide-node)
//!  node-2.pem / node-2.key   a second node certificate for the same name
//!  client.pem / client.key   a client: CN client-a
//!  client-b.pem / .key       a client: CN client-b
//!  client-c.pem / .key       a client: CN client-c (no such user, for PKI login)
//!  revoked.pem / .key        a client: CN client-a, serial 0B01DE (for cert-blacklist)
//!  expired.pem / .key        a node certificate for NODE-NAME that expired in 2021
//!  expired-client.pem / .key a client certificate that expired in 2021
//!  other-ca.pem              another CA
//!  other-node.pem / .key     NODE-NAME, signed by the other CA
//!  other-client.pem / .key   CN client-a, signed by the other CA
//!  ca-2.pem, node-ca2.pem / .key   a new CA and a node certificate it signs (rotation)
//! ```
//!
//! Node certificates carry both server and client authentication (nodes
//! dial each other); keys are ECDSA P-256.

use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
};
use std::path::{Path, PathBuf};

struct Authority {
    certificate: Certificate,
    key: KeyPair,
}

fn authority(name: &str) -> Result<Authority, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Bolide test");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 1, 1);
    Ok(Authority {
        certificate: params.self_signed(&key)?,
        key,
    })
}

struct Leaf<'a> {
    common_name: &'a str,
    dns_names: &'a [&'a str],
    node: bool,
    expired: bool,
    serial: Option<u64>,
}

fn leaf(issuer: &Authority, leaf: &Leaf<'_>) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let names: Vec<String> = leaf
        .dns_names
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Bolide test");
    params
        .distinguished_name
        .push(DnType::CommonName, leaf.common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = if leaf.node {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    if leaf.expired {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2021, 1, 1);
    } else {
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2099, 1, 1);
    }
    if let Some(serial) = leaf.serial {
        params.serial_number = Some(SerialNumber::from(serial));
    }
    let certificate = params.signed_by(&key, &issuer.certificate, &issuer.key)?;
    Ok((certificate.pem(), key.serialize_pem()))
}

fn write(directory: &Path, name: &str, text: &str) -> Result<(), String> {
    let path = directory.join(name);
    std::fs::write(&path, text).map_err(|error| format!("{}: {error}", path.display()))
}

fn write_pair(directory: &Path, name: &str, pair: (String, String)) -> Result<(), String> {
    write(directory, &format!("{name}.pem"), &pair.0)?;
    write(directory, &format!("{name}.key"), &pair.1)
}

fn run(directory: &Path, node_name: &str) -> Result<(), String> {
    let fail = |error: rcgen::Error| error.to_string();
    std::fs::create_dir_all(directory)
        .map_err(|error| format!("{}: {error}", directory.display()))?;
    let ca = authority("Bolide test CA").map_err(fail)?;
    let other = authority("Other CA").map_err(fail)?;
    let ca2 = authority("Bolide test CA 2").map_err(fail)?;
    write(directory, "ca.pem", &ca.certificate.pem())?;
    write(directory, "other-ca.pem", &other.certificate.pem())?;
    write(directory, "ca-2.pem", &ca2.certificate.pem())?;
    let node = |expired| Leaf {
        common_name: node_name,
        dns_names: std::slice::from_ref(&node_name),
        node: true,
        expired,
        serial: None,
    };
    let client = |name, expired, serial| Leaf {
        common_name: name,
        dns_names: &[],
        node: false,
        expired,
        serial,
    };
    write_pair(directory, "node", leaf(&ca, &node(false)).map_err(fail)?)?;
    write_pair(directory, "node-2", leaf(&ca, &node(false)).map_err(fail)?)?;
    write_pair(directory, "expired", leaf(&ca, &node(true)).map_err(fail)?)?;
    write_pair(
        directory,
        "other-node",
        leaf(&other, &node(false)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "node-ca2",
        leaf(&ca2, &node(false)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "client",
        leaf(&ca, &client("client-a", false, None)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "client-b",
        leaf(&ca, &client("client-b", false, None)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "client-c",
        leaf(&ca, &client("client-c", false, None)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "revoked",
        leaf(&ca, &client("client-a", false, Some(0x0B01DE))).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "expired-client",
        leaf(&ca, &client("client-a", true, None)).map_err(fail)?,
    )?;
    write_pair(
        directory,
        "other-client",
        leaf(&other, &client("client-a", false, None)).map_err(fail)?,
    )?;
    Ok(())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(directory) = args.next().map(PathBuf::from) else {
        eprintln!("usage: tls_certs DIR [NODE-NAME]");
        std::process::exit(2);
    };
    let node_name = args.next().unwrap_or_else(|| "bolide-node".to_owned());
    if let Err(error) = run(&directory, &node_name) {
        eprintln!("tls_certs: {error}");
        std::process::exit(1);
    }
}
