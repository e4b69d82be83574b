//! Secondary index info commands: `sindex-create`, `sindex-delete`,
//! `sindex-exists`, `sindex-list`, `sindex-stat` and the older `sindex`,
//! in the formats of the server's `thr_info.c` and `sindex_manager.c`.

use crate::cluster::Context;
use bolide_transaction::sindex::definition::{self, Definition, InfoError};
use bolide_transaction::sindex::SecondaryIndex;
use bolide_types::ResultCode;
use bolide_wire::info::InfoCommand;
use std::fmt::Write;

/// The answer to one of the secondary index commands.
pub fn answer(node: &Context, command: &InfoCommand<'_>) -> String {
    let result = match command.name {
        "sindex-create" => create(node, command),
        "sindex-delete" => delete(node, command),
        "sindex-exists" => exists(node, command),
        "sindex-list" => list(node, command),
        "sindex-stat" => stat(node, command),
        _ => Ok(legacy(node, command)),
    };
    result.unwrap_or_else(|error| error.answer())
}

fn create(node: &Context, command: &InfoCommand<'_>) -> Result<String, InfoError> {
    let definition = Definition::from_create(command)?;
    let (key, text) = (definition.key(), definition.to_command());
    if !node.services.sindexes.has_namespace(&definition.namespace) {
        // As Aerospike 8.1: the definition goes into the cluster's
        // metadata and the answer is "ok"; only nodes holding the
        // namespace build it. A client waiting for the build then hears
        // "namespace not found on node" from `sindex-stat` (result 20).
        node.cluster.share("sindex", &key, &text, false);
        return Ok("ok".to_owned());
    }
    node.services.sindexes.create(definition)?;
    // Every other node of the cluster builds it too.
    node.cluster.share("sindex", &key, &text, false);
    Ok("ok".to_owned())
}

fn delete(node: &Context, command: &InfoCommand<'_>) -> Result<String, InfoError> {
    let name = definition::required(command, "indexname")?;
    let namespace = definition::namespace_of(command)?;
    let key = node
        .services
        .sindexes
        .definitions()
        .1
        .into_iter()
        .find(|d| d.namespace == namespace && d.name == name)
        .map(|d| d.key());
    node.services.sindexes.delete(namespace, name)?;
    if let Some(key) = key {
        node.cluster.share("sindex", &key, "", true);
    }
    Ok("ok".to_owned())
}

fn exists(node: &Context, command: &InfoCommand<'_>) -> Result<String, InfoError> {
    let name = definition::required(command, "indexname")?;
    let namespace = local_namespace(node, command)?;
    let found = node.services.sindexes.find(namespace, name).is_some();
    Ok(found.to_string())
}

fn list(node: &Context, command: &InfoCommand<'_>) -> Result<String, InfoError> {
    let namespace = match command.param("namespace").or_else(|| command.param("ns")) {
        None => None,
        Some(_) => Some(local_namespace(node, command)?),
    };
    match command.param("b64") {
        None | Some("true") | Some("false") => {}
        Some(_) => return Err(InfoError::new(ResultCode::Parameter, "bad b64")),
    }
    Ok(list_lines(node, namespace))
}

fn stat(node: &Context, command: &InfoCommand<'_>) -> Result<String, InfoError> {
    let name = definition::required(command, "indexname")?;
    let namespace = local_namespace(node, command)?;
    match node.services.sindexes.find(namespace, name) {
        Some(index) => Ok(statistics(&index)),
        None => Err(InfoError::new(ResultCode::IndexNotFound, "no index")),
    }
}

/// `sindex`, `sindex/<ns>`, `sindex/<ns>/<name>` (deprecated forms).
fn legacy(node: &Context, command: &InfoCommand<'_>) -> String {
    let Some(namespace) = command.path.first() else {
        return list_lines(node, None);
    };
    if !node.services.sindexes.has_namespace(namespace) {
        return "ns_type=unknown".to_owned();
    }
    match command.path.get(1) {
        None => list_lines(node, Some(namespace)),
        Some(name) => match node.services.sindexes.find(namespace, name) {
            Some(index) => statistics(&index),
            None => InfoError::new(ResultCode::IndexNotFound, "no index").answer(),
        },
    }
}

/// A namespace parameter naming one of this node's namespaces.
fn local_namespace<'a>(node: &Context, command: &InfoCommand<'a>) -> Result<&'a str, InfoError> {
    let namespace = definition::namespace_of(command)?;
    if node.services.sindexes.has_namespace(namespace) {
        Ok(namespace)
    } else {
        Err(InfoError::new(
            ResultCode::Namespace,
            "namespace not found on node",
        ))
    }
}

/// `ns=..:indexname=..:set=..:bin=..:type=..:indextype=..:context=..:exp=..:state=..`
/// per index, `;`-separated. Contexts and expressions are shown in base64.
fn list_lines(node: &Context, namespace: Option<&str>) -> String {
    let mut text = String::new();
    for index in node.services.sindexes.list(namespace) {
        let d = &index.definition;
        let _ = write!(
            text,
            "ns={}:indexname={}:set={}:bin={}:type={}:indextype={}:context={}:exp={}:state={};",
            d.namespace,
            index.name(),
            d.set.as_deref().unwrap_or("null"),
            if d.bin.is_empty() { "null" } else { &d.bin },
            d.key_type.name(),
            d.collection.name(),
            d.context_base64().as_deref().unwrap_or("null"),
            d.expression_base64().as_deref().unwrap_or("null"),
            if index.is_readable() { "RW" } else { "WO" },
        );
    }
    text.pop();
    text
}

/// `sindex-stat`: live statistics of one index.
fn statistics(index: &SecondaryIndex) -> String {
    format!(
        "entries={};used_bytes={};load_pct={};load_time={};stat_gc_recs=0;queries={}",
        index.entries(),
        index.used_bytes(),
        index.load_pct(),
        index.load_time_ms(),
        index.queries.load(std::sync::atomic::Ordering::Relaxed),
    )
}
