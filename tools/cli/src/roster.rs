//! `bolide roster show|set|recluster`: the roster of strong-consistency
//! namespaces, as asadm's `show roster`, `manage roster stage` and `manage
//! recluster` handle it, over the info protocol only (`roster:`,
//! `roster-set:`, `recluster:`), so it works against Aerospike EE too.
//!
//! `set` only stages a roster (the pending roster); `recluster` makes the
//! cluster adopt it (docs/strong-consistency.md).

use crate::admin::table;
use crate::info::{self, pairs, Node};
use crate::Target;
use clap::Subcommand;
use comfy_table::{Cell, CellAlignment};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum RosterCommand {
    /// Every node's roster, pending roster and observed nodes of each
    /// strong-consistency namespace, with its unavailable and dead
    /// partitions.
    Show {
        /// Only this namespace.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
    },
    /// Stage a roster: the observed nodes, or the given ones
    /// (`A1,A2@1,...`, `node@rack`). It takes effect at `bolide roster
    /// recluster`.
    Set {
        /// The namespace (may be left out when the cluster has only one
        /// strong-consistency namespace).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Node ids with optional racks, comma-separated; the observed
        /// nodes when left out.
        #[arg(value_delimiter = ',', value_name = "NODE[@RACK]")]
        nodes: Vec<String>,
    },
    /// Send `recluster:` to every node (the principal runs a new
    /// exchange, in which the staged roster takes effect).
    Recluster,
}

/// How long `set` and `recluster` wait for every node to show the result.
const SETTLE_WAIT: Duration = Duration::from_secs(15);

pub fn run(target: &Target, command: RosterCommand) -> Result<(), String> {
    let nodes = info::discover(&target.seed(), target.timeout)?;
    match command {
        RosterCommand::Show { namespace } => show(&nodes, namespace.as_deref(), target),
        RosterCommand::Set {
            namespace,
            nodes: list,
        } => {
            let namespace = pick_namespace(&nodes, namespace, target)?;
            set(&nodes, &namespace, &list, target)
        }
        RosterCommand::Recluster => recluster(&nodes, target),
    }
}

/// One node's view of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct View {
    roster: String,
    pending: String,
    observed: String,
}

/// `roster:`'s answer by namespace: `ns=NS:roster=..:pending_roster=..:observed_nodes=..;...`.
fn parse_rosters(answer: &str) -> BTreeMap<String, View> {
    let mut out = BTreeMap::new();
    for entry in answer.split(';').filter(|entry| !entry.is_empty()) {
        let fields: BTreeMap<String, String> = pairs(entry, ':').into_iter().collect();
        let Some(ns) = fields.get("ns") else {
            continue;
        };
        let field = |name: &str| fields.get(name).cloned().unwrap_or_else(|| "-".to_owned());
        out.insert(
            ns.clone(),
            View {
                roster: field("roster"),
                pending: field("pending_roster"),
                observed: field("observed_nodes"),
            },
        );
    }
    out
}

fn rosters(node: &Node, target: &Target) -> Result<BTreeMap<String, View>, String> {
    let answer = info::value(&node.address, "roster:", target.timeout)?;
    let answer = info::check(&answer).map_err(|error| format!("{}: {error}", node.name))?;
    Ok(parse_rosters(answer))
}

/// A roster's entries as a set: the order a node prints them in does not
/// matter, nor `null` against nothing.
fn entries(list: &str) -> Vec<String> {
    let mut out: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty() && *entry != "null")
        .map(str::to_ascii_uppercase)
        .collect();
    out.sort();
    out
}

/// The node id of a roster entry (`A1@2` → `A1`).
fn node_id(entry: &str) -> &str {
    entry.split_once('@').map_or(entry, |(id, _)| id)
}

fn pick_namespace(
    nodes: &[Node],
    namespace: Option<String>,
    target: &Target,
) -> Result<String, String> {
    let known = rosters(&nodes[0], target)?;
    match namespace {
        Some(ns) if known.contains_key(&ns) => Ok(ns),
        Some(ns) => Err(format!(
            "namespace {ns} is not a strong-consistency namespace of this cluster{}",
            list_of(&known)
        )),
        None if known.len() == 1 => Ok(known.into_keys().next().unwrap_or_default()),
        None if known.is_empty() => {
            Err("the cluster has no strong-consistency namespace".to_owned())
        }
        None => Err(format!(
            "several strong-consistency namespaces{}: name one with -n",
            list_of(&known)
        )),
    }
}

fn list_of(known: &BTreeMap<String, View>) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            known.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    }
}

fn show(nodes: &[Node], namespace: Option<&str>, target: &Target) -> Result<(), String> {
    let mut table = table(&[
        "Node",
        "Namespace",
        "Roster",
        "Pending roster",
        "Observed nodes",
        "Roster nodes present",
        "Unavailable",
        "Dead",
    ]);
    let mut rows = 0;
    let mut notes = Vec::new();
    for node in nodes {
        let views = rosters(node, target)?;
        for (ns, view) in &views {
            if namespace.is_some_and(|wanted| wanted != ns) {
                continue;
            }
            let stats = info::value(&node.address, &format!("namespace/{ns}"), target.timeout)?;
            let stats: BTreeMap<String, String> = pairs(&stats, ';').into_iter().collect();
            let stat = |key: &str| stats.get(key).cloned().unwrap_or_else(|| "-".to_owned());
            table.add_row(vec![
                Cell::new(&node.name),
                Cell::new(ns),
                Cell::new(&view.roster),
                Cell::new(&view.pending),
                Cell::new(&view.observed),
                right(stat("ns_cluster_size")),
                right(stat("unavailable_partitions")),
                right(stat("dead_partitions")),
            ]);
            rows += 1;
            notes.extend(advice(&node.name, ns, view, &stat("dead_partitions")));
        }
    }
    if rows == 0 {
        return Err(match namespace {
            Some(ns) => {
                format!("namespace {ns} is not a strong-consistency namespace of this cluster")
            }
            None => "the cluster has no strong-consistency namespace".to_owned(),
        });
    }
    println!(
        "Roster ({} nodes found from {})",
        nodes.len(),
        target.seed()
    );
    println!("{table}");
    notes.sort();
    notes.dedup();
    for note in notes {
        println!("{note}");
    }
    Ok(())
}

/// What the operator may want to do, as asadm's health check says it.
fn advice(node: &str, ns: &str, view: &View, dead: &str) -> Vec<String> {
    let mut out = Vec::new();
    if entries(&view.roster).is_empty() {
        out.push(format!(
            "{ns}: no roster in force, nothing is served: `bolide roster set -n {ns}` then `bolide roster recluster`"
        ));
    } else if entries(&view.pending) != entries(&view.roster) {
        out.push(format!(
            "{ns}: a staged roster is not in force yet: `bolide roster recluster`"
        ));
    } else {
        let observed: Vec<String> = entries(&view.observed)
            .iter()
            .map(|entry| node_id(entry).to_owned())
            .collect();
        let missing: Vec<String> = entries(&view.roster)
            .iter()
            .map(|entry| node_id(entry).to_owned())
            .filter(|id| !observed.contains(id))
            .collect();
        if !missing.is_empty() {
            out.push(format!(
                "{ns}: roster nodes not observed by {node}: {}",
                missing.join(",")
            ));
        }
    }
    if dead != "0" && dead != "-" {
        out.push(format!(
            "{ns}: {node} reports {dead} dead partitions: their data may be lost; `revive` is the operator's decision (docs/strong-consistency.md)"
        ));
    }
    out
}

fn principal<'a>(nodes: &'a [Node], target: &Target) -> Result<&'a Node, String> {
    let stats = info::value(&nodes[0].address, "statistics", target.timeout)?;
    let stats: BTreeMap<String, String> = pairs(&stats, ';').into_iter().collect();
    let principal = stats.get("cluster_principal").cloned().unwrap_or_default();
    Ok(nodes
        .iter()
        .find(|node| node.name.eq_ignore_ascii_case(&principal))
        .unwrap_or(&nodes[0]))
}

fn set(nodes: &[Node], namespace: &str, list: &[String], target: &Target) -> Result<(), String> {
    let principal = principal(nodes, target)?;
    let views = rosters(principal, target)?;
    let view = views.get(namespace).cloned().unwrap_or_default();
    let staged = if list.is_empty() {
        if entries(&view.observed).is_empty() {
            return Err(format!("{}: no observed nodes to stage", principal.name));
        }
        view.observed.clone()
    } else {
        let observed: Vec<String> = entries(&view.observed)
            .iter()
            .map(|entry| node_id(entry).to_owned())
            .collect();
        let absent: Vec<&str> = list
            .iter()
            .map(|entry| node_id(entry.trim()))
            .filter(|id| !observed.contains(&id.to_ascii_uppercase()))
            .collect();
        if !absent.is_empty() {
            eprintln!(
                "warning: not among the observed nodes ({}): {}",
                view.observed,
                absent.join(",")
            );
        }
        list.iter()
            .map(|entry| entry.trim())
            .collect::<Vec<_>>()
            .join(",")
    };
    let command = format!("roster-set:namespace={namespace};nodes={staged}");
    let answer = info::value(&principal.address, &command, target.timeout)?;
    if answer != "ok" {
        return Err(format!("{}: {answer}", principal.name));
    }
    let want = entries(&staged);
    let settled = wait_until(nodes, target, |views| {
        views
            .get(namespace)
            .is_some_and(|view| entries(&view.pending) == want)
    })?;
    println!(
        "Staged the roster of {namespace} on {}: {staged}",
        principal.name
    );
    if settled {
        println!("Every node shows it as pending; `bolide roster recluster` puts it in force.");
        Ok(())
    } else {
        Err(format!(
            "the staged roster did not reach every node within {} s (bolide roster show)",
            SETTLE_WAIT.as_secs()
        ))
    }
}

fn recluster(nodes: &[Node], target: &Target) -> Result<(), String> {
    let mut table = table(&["Node", "recluster:"]);
    let mut accepted = false;
    for node in nodes {
        let answer = info::value(&node.address, "recluster:", target.timeout)
            .unwrap_or_else(|error| format!("no answer: {error}"));
        accepted |= answer == "ok";
        table.add_row(vec![Cell::new(&node.name), Cell::new(&answer)]);
    }
    println!("{table}");
    if !accepted {
        return Err("no node took the recluster (the principal answers ok)".to_owned());
    }
    // The new exchange takes a moment: wait until every node has every
    // staged roster in force, then show it.
    let settled = wait_until(nodes, target, |views| {
        views
            .values()
            .all(|view| entries(&view.pending) == entries(&view.roster))
    })?;
    if !settled {
        println!(
            "Some staged roster is not in force yet after {} s.",
            SETTLE_WAIT.as_secs()
        );
    }
    show(nodes, None, target).or_else(|error| {
        // An AP-only cluster: reclustered, nothing to show.
        println!("{error}");
        Ok(())
    })
}

/// Polls every node's `roster:` until `done` holds for all of them or
/// SETTLE_WAIT passes; whether it held.
fn wait_until(
    nodes: &[Node],
    target: &Target,
    done: impl Fn(&BTreeMap<String, View>) -> bool,
) -> Result<bool, String> {
    let deadline = Instant::now() + SETTLE_WAIT;
    loop {
        let mut all = true;
        for node in nodes {
            match rosters(node, target) {
                Ok(views) => all &= done(&views),
                Err(_) => all = false,
            }
        }
        if all {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn right(text: impl ToString) -> Cell {
    Cell::new(text.to_string()).set_alignment(CellAlignment::Right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roster_answers_parse_by_namespace() {
        let views = parse_rosters(
            "ns=test:roster=A3,A2,A1:pending_roster=A3,A2,A1:observed_nodes=A3,A2,A1;\
             ns=sc2:roster=null:pending_roster=B1@2:observed_nodes=B1@2",
        );
        assert_eq!(views.len(), 2);
        assert_eq!(views["test"].roster, "A3,A2,A1");
        assert_eq!(views["sc2"].roster, "null");
        assert_eq!(views["sc2"].pending, "B1@2");
        assert!(parse_rosters("").is_empty());
    }

    #[test]
    fn roster_entries_compare_as_sets() {
        assert_eq!(entries("A3,A2,A1"), entries("a1,A2 ,A3"));
        assert!(entries("null").is_empty());
        assert_ne!(entries("A1@1,A2"), entries("A1,A2"));
        assert_eq!(node_id("A1@7"), "A1");
        assert_eq!(node_id("A1"), "A1");
    }

    #[test]
    fn advice_names_the_next_step() {
        let view = |roster: &str, pending: &str, observed: &str| View {
            roster: roster.to_owned(),
            pending: pending.to_owned(),
            observed: observed.to_owned(),
        };
        let none = advice("A1", "test", &view("null", "null", "A1,A2"), "0");
        assert!(none[0].contains("no roster in force"), "{none:?}");
        let staged = advice("A1", "test", &view("A1", "A1,A2", "A1,A2"), "0");
        assert!(staged[0].contains("bolide roster recluster"), "{staged:?}");
        let missing = advice(
            "A1",
            "test",
            &view("A1,A2@1,A3", "A3,A2@1,A1", "A1,A2"),
            "0",
        );
        assert_eq!(missing, ["test: roster nodes not observed by A1: A3"]);
        let dead = advice("A1", "test", &view("A1", "A1", "A1"), "12");
        assert!(dead[0].contains("12 dead partitions"), "{dead:?}");
        assert!(advice("A1", "test", &view("A1", "A1", "A1"), "0").is_empty());
    }
}
