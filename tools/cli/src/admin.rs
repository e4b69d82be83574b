//! asadm-style commands: `info`, `show statistics|config|latencies`,
//! `asinfo`. Every node is found from the seed and asked over the info
//! protocol; figures are shown as the nodes answer them.

use crate::info::{self, pairs, Node};
use crate::Target;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table};
use std::collections::BTreeMap;

/// Which `show` command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Statistics,
    Config,
    Latencies,
}

pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().map(Cell::new));
    table
}

fn right(text: impl ToString) -> Cell {
    Cell::new(text.to_string()).set_alignment(CellAlignment::Right)
}

/// `bolide info`: a table of the nodes, then each node's namespaces.
pub fn info(target: &Target) -> Result<(), String> {
    let nodes = info::discover(&target.seed(), target.timeout)?;
    let mut summary = table(&[
        "Node",
        "Address",
        "Build",
        "Cluster",
        "Size",
        "Uptime",
        "Connections",
        "Objects",
        "RSS",
        "Migrations",
    ]);
    let mut details = Vec::new();
    for node in &nodes {
        let answers = info::request(
            &node.address,
            &["build", "cluster-name", "statistics", "namespaces"],
            target.timeout,
        )?;
        let stats: BTreeMap<String, String> =
            pairs(answers.get("statistics").map_or("", String::as_str), ';')
                .into_iter()
                .collect();
        let stat = |key: &str| stats.get(key).cloned().unwrap_or_else(|| "-".to_owned());
        summary.add_row(vec![
            Cell::new(&node.name),
            Cell::new(&node.address),
            Cell::new(answers.get("build").cloned().unwrap_or_default()),
            Cell::new(answers.get("cluster-name").cloned().unwrap_or_default()),
            right(stat("cluster_size")),
            right(duration(stat("uptime").parse().unwrap_or(0))),
            right(stat("client_connections")),
            right(thousands(&stat("objects"))),
            right(bytes(stat("process_rss_bytes").parse().unwrap_or(0))),
            right(stat("migrate_partitions_remaining")),
        ]);
        let namespaces: Vec<String> = answers
            .get("namespaces")
            .map_or("", String::as_str)
            .split(';')
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned)
            .collect();
        details.push((node.clone(), namespace_table(node, &namespaces, target)?));
    }
    println!("Nodes ({} found from {})", nodes.len(), target.seed());
    println!("{summary}");
    for (node, table) in details {
        println!("\nNamespaces on {} ({})", node.name, node.address);
        println!("{table}");
    }
    Ok(())
}

fn namespace_table(node: &Node, namespaces: &[String], target: &Target) -> Result<Table, String> {
    let commands: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("namespace/{ns}"))
        .collect();
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let answers = info::request(&node.address, &commands, target.timeout)?;
    let mut table = table(&[
        "Namespace",
        "Engine",
        "Objects",
        "Memory used",
        "Memory %",
        "Evict %",
        "Stop-writes %",
        "Device used",
        "Free blocks %",
        "Stop writes",
        "Expired",
        "Evicted",
        "Default TTL",
    ]);
    for (namespace, command) in namespaces.iter().zip(&commands) {
        let stats: BTreeMap<String, String> =
            pairs(answers.get(*command).map_or("", String::as_str), ';')
                .into_iter()
                .collect();
        let stat = |key: &str| stats.get(key).cloned().unwrap_or_else(|| "-".to_owned());
        let device = stats.contains_key("device_total_bytes");
        table.add_row(vec![
            Cell::new(namespace),
            Cell::new(stat("storage-engine")),
            right(thousands(&stat("objects"))),
            right(bytes(stat("memory_used_bytes").parse().unwrap_or(0))),
            right(stat("data_used_pct")),
            right(stat("evict-used-pct")),
            right(stat("stop-writes-used-pct")),
            right(if device {
                bytes(stat("device_used_bytes").parse().unwrap_or(0))
            } else {
                "-".to_owned()
            }),
            right(if device {
                stat("device_available_pct")
            } else {
                "-".to_owned()
            }),
            Cell::new(stat("stop_writes")),
            right(thousands(&stat("expired_objects"))),
            right(thousands(&stat("evicted_objects"))),
            right(match stat("default-ttl").parse::<u64>() {
                Ok(0) => "never".to_owned(),
                Ok(seconds) => duration(seconds),
                Err(_) => "-".to_owned(),
            }),
        ]);
    }
    Ok(table)
}

/// `bolide show statistics|config|latencies [namespace NS]`.
pub fn show(target: &Target, what: Show, namespace: Option<&str>) -> Result<(), String> {
    let nodes = info::discover(&target.seed(), target.timeout)?;
    let namespaces = match namespace {
        Some(namespace) => vec![namespace.to_owned()],
        None => {
            let answer = info::value(&nodes[0].address, "namespaces", target.timeout)?;
            answer
                .split(';')
                .filter(|ns| !ns.is_empty())
                .map(str::to_owned)
                .collect()
        }
    };
    match what {
        Show::Statistics => {
            if namespace.is_none() {
                print_by_node("Service statistics", &nodes, "statistics", target)?;
            }
            for namespace in &namespaces {
                print_by_node(
                    &format!("Namespace {namespace} statistics"),
                    &nodes,
                    &format!("namespace/{namespace}"),
                    target,
                )?;
            }
            Ok(())
        }
        Show::Config => {
            if namespace.is_none() {
                print_by_node(
                    "Service configuration",
                    &nodes,
                    "get-config:context=service",
                    target,
                )?;
                print_by_node(
                    "Network configuration",
                    &nodes,
                    "get-config:context=network",
                    target,
                )?;
            }
            for namespace in &namespaces {
                print_by_node(
                    &format!("Namespace {namespace} configuration"),
                    &nodes,
                    &format!("get-config:context=namespace;id={namespace}"),
                    target,
                )?;
            }
            Ok(())
        }
        Show::Latencies => latencies(&nodes, namespace, target),
    }
}

/// One info command on every node: a row per key, a column per node.
fn print_by_node(
    title: &str,
    nodes: &[Node],
    command: &str,
    target: &Target,
) -> Result<(), String> {
    let mut keys: Vec<String> = Vec::new();
    let mut columns = Vec::new();
    for node in nodes {
        let answer = info::value(&node.address, command, target.timeout)?;
        let answer = info::check(&answer).map_err(|error| format!("{}: {error}", node.address))?;
        if answer == "type=unknown" || answer == "ns_type=unknown" {
            return Err(format!("{}: no such namespace", node.address));
        }
        let values: BTreeMap<String, String> = pairs(answer, ';').into_iter().collect();
        for key in values.keys() {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        columns.push(values);
    }
    keys.sort();
    let mut header = vec!["".to_owned()];
    header.extend(nodes.iter().map(|node| node.name.clone()));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = table(&header);
    for key in &keys {
        let mut row = vec![Cell::new(key)];
        for column in &columns {
            row.push(right(column.get(key).cloned().unwrap_or_default()));
        }
        table.add_row(row);
    }
    println!("{title}");
    println!("{table}\n");
    Ok(())
}

fn latencies(nodes: &[Node], namespace: Option<&str>, target: &Target) -> Result<(), String> {
    let mut table = table(&[
        "Histogram",
        "Node",
        "ops/sec",
        ">1ms",
        ">2ms",
        ">4ms",
        ">8ms",
        ">16ms",
        ">32ms",
        ">64ms",
    ]);
    let mut rows = 0;
    for node in nodes {
        let answer = info::value(&node.address, "latencies:", target.timeout)?;
        let answer = info::check(&answer).map_err(|error| format!("{}: {error}", node.address))?;
        for entry in answer.split(';').filter(|entry| !entry.is_empty()) {
            let Some((name, values)) = entry.split_once(':') else {
                continue;
            };
            if let Some(namespace) = namespace {
                if !name.starts_with(&format!("{{{namespace}}}-")) {
                    continue;
                }
            }
            let values: Vec<&str> = values.split(',').collect();
            let mut row = vec![Cell::new(name), Cell::new(&node.name)];
            if values.len() < 9 {
                row.push(right("-"));
                row.extend((0..7).map(|_| right("-")));
            } else {
                row.extend(values[1..9].iter().map(right));
            }
            table.add_row(row);
            rows += 1;
        }
    }
    if rows == 0 {
        return Err(match namespace {
            Some(namespace) => format!("no latency histograms for namespace {namespace}"),
            None => "no latency histograms".to_owned(),
        });
    }
    println!("Latency of the last ticker slice (% of requests over each mark)");
    println!("{table}");
    Ok(())
}

/// `bolide asinfo CMD`: the seed's raw answer (`-l`: one field per line).
pub fn asinfo(target: &Target, command: &str, lines: bool) -> Result<(), String> {
    let answer = info::value(&target.seed(), command, target.timeout)?;
    if lines {
        for field in answer.split(';') {
            println!("{field}");
        }
    } else {
        println!("{answer}");
    }
    if answer.starts_with("ERROR") {
        return Err(format!("the node answered {answer}"));
    }
    Ok(())
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

pub fn duration(seconds: u64) -> String {
    let (days, hours) = (seconds / 86_400, seconds % 86_400 / 3600);
    let (minutes, rest) = (seconds % 3600 / 60, seconds % 60);
    if days > 0 {
        format!("{days}d {hours}h")
    } else if hours > 0 {
        format!("{hours}h {minutes}m")
    } else if minutes > 0 {
        format!("{minutes}m {rest}s")
    } else {
        format!("{rest}s")
    }
}

pub fn thousands(text: &str) -> String {
    let Ok(n) = text.parse::<i64>() else {
        return text.to_owned();
    };
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (index, c) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}
