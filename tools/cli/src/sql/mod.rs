//! `bolide sql`: aql-style statements over the official Aerospike client
//! (records) and the info protocol (SHOW, truncation progress), with an
//! interactive prompt (line editing, history) or one statement (`-c`).

pub mod parse;
mod value;

use crate::admin::{table, thousands};
use crate::info;
use crate::progress::Progress;
use crate::Target;
use aerospike::expressions::{self as exp, Expression};
use aerospike::query::{CollectionIndexType, Filter, IndexType};
use aerospike::{
    AdminPolicy, Bin, Bins, Client, Key, PartitionFilter, QueryPolicy, ReadPolicy, Record,
    WritePolicy,
};
use comfy_table::Cell;
use futures::StreamExt;
use parse::{Format, IndexKind, Literal, Predicate, ShowWhat, Statement};
use std::io::Write;
use std::time::{Duration, Instant};

/// Rows of a streamed SELECT printed as one table; memory stays bounded
/// whatever the result size.
const TABLE_BLOCK_ROWS: usize = 1000;
/// How long a TRUNCATE waits for the records to be swept.
const TRUNCATE_WAIT: Duration = Duration::from_secs(60);
/// How long a CREATE INDEX waits for every node to finish building it.
const INDEX_WAIT: Duration = Duration::from_secs(600);

const HELP: &str = "\
Statements (keywords in any case, a trailing ';' is optional):
  INSERT INTO ns.set (PK, bin, ...) VALUES (value, value, ...)
  SELECT * | bin, ... FROM ns[.set] [WHERE PK = v | WHERE bin = v | WHERE bin BETWEEN a AND b] [LIMIT n]
  DELETE FROM ns.set WHERE PK = v
  SHOW NAMESPACES | SETS | BINS | INDEXES | UDFS
  TRUNCATE ns[.set]
  CREATE INDEX name ON ns[.set] (bin) NUMERIC | STRING
  DROP INDEX ns[.set] name
  EXPLAIN SELECT ...
  SET OUTPUT TABLE | JSON
  HELP, QUIT
Values: 42, -1.5, 'text', \"text\", true, false, JSON('[1, {\"a\": 2}]'), LIST('[...]'), MAP('{...}')
WHERE bin = / BETWEEN reads a secondary index on the bin when there is one (integers
for a NUMERIC index, a string for a STRING one), else scans with a filter expression.";

/// An open session: the client, the output format, the runtime.
pub struct Session {
    runtime: tokio::runtime::Runtime,
    client: Client,
    target: Target,
    format: Format,
    progress: bool,
}

impl Session {
    pub fn connect(target: &Target, format: Format, progress: bool) -> Result<Session, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|error| format!("cannot start runtime: {error}"))?;
        let seed = target.client_seed();
        let client = runtime.block_on(async {
            tokio::time::timeout(
                target.timeout * 3,
                Client::new(&target.client_policy(), &seed),
            )
            .await
        });
        let client = match client {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(format!("cannot connect to {seed}: {error}")),
            Err(_) => return Err(format!("cannot connect to {seed}: timed out")),
        };
        Ok(Session {
            runtime,
            client,
            target: target.clone(),
            format,
            progress,
        })
    }

    /// Parses and runs one statement. Ok(false) once the session should end.
    pub fn execute(&mut self, text: &str) -> Result<bool, String> {
        let statement = parse::parse(text).map_err(|error| error.render(text))?;
        match statement {
            Statement::Quit => return Ok(false),
            Statement::Help => println!("{HELP}"),
            Statement::SetOutput(format) => {
                self.format = format;
                println!(
                    "OUTPUT = {}",
                    if format == Format::Json {
                        "JSON"
                    } else {
                        "TABLE"
                    }
                );
            }
            Statement::Insert {
                namespace,
                set,
                pk,
                bins,
            } => self.insert(&namespace, &set, &pk, &bins)?,
            Statement::Delete { namespace, set, pk } => self.delete(&namespace, &set, &pk)?,
            Statement::Select {
                bins,
                namespace,
                set,
                predicate,
                limit,
            } => self.select(bins, &namespace, set.as_deref(), predicate, limit)?,
            Statement::Show(what) => self.show(what)?,
            Statement::Truncate { namespace, set } => self.truncate(&namespace, set.as_deref())?,
            Statement::CreateIndex {
                name,
                namespace,
                set,
                bin,
                kind,
            } => self.create_index(&name, &namespace, set.as_deref(), &bin, kind)?,
            Statement::DropIndex {
                namespace,
                set,
                name,
            } => self.drop_index(&namespace, set.as_deref(), &name)?,
            Statement::Explain(select) => self.explain(&select)?,
        }
        Ok(true)
    }

    fn insert(
        &self,
        namespace: &str,
        set: &str,
        pk: &Literal,
        bins: &[(String, Literal)],
    ) -> Result<(), String> {
        let key =
            Key::new(namespace, set, value::to_value(pk)).map_err(|error| error.to_string())?;
        let bins: Vec<Bin> = bins
            .iter()
            .map(|(name, literal)| Bin::new(name.clone(), value::to_value(literal)))
            .collect();
        let policy = WritePolicy {
            send_key: true,
            ..WritePolicy::default()
        };
        self.runtime
            .block_on(self.client.put(&policy, &key, &bins))
            .map_err(|error| format!("INSERT failed: {error}"))?;
        println!("OK, 1 record affected.");
        Ok(())
    }

    fn delete(&self, namespace: &str, set: &str, pk: &Literal) -> Result<(), String> {
        let key =
            Key::new(namespace, set, value::to_value(pk)).map_err(|error| error.to_string())?;
        let existed = self
            .runtime
            .block_on(self.client.delete(&WritePolicy::default(), &key))
            .map_err(|error| format!("DELETE failed: {error}"))?;
        println!(
            "OK, {} record{} affected.",
            u8::from(existed),
            if existed { "" } else { "s" }
        );
        Ok(())
    }

    fn select(
        &self,
        bins: Option<Vec<String>>,
        namespace: &str,
        set: Option<&str>,
        predicate: Option<Predicate>,
        limit: Option<u64>,
    ) -> Result<(), String> {
        let selected = match &bins {
            None => Bins::All,
            Some(bins) => Bins::from(bins.clone()),
        };
        let started = Instant::now();
        let mut output = Rows::new(self.format, bins);
        if let Some(Predicate::Pk(pk)) = &predicate {
            let key = Key::new(namespace, set.unwrap_or(""), value::to_value(pk))
                .map_err(|error| error.to_string())?;
            match self
                .runtime
                .block_on(self.client.get(&ReadPolicy::default(), &key, selected))
            {
                // The answer carries no key unless it was stored: show the one asked.
                Ok(record) => output.push_with_pk(&record, Some(value::to_value(pk))),
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(format!("SELECT failed: {error}")),
            }
            output.finish(started);
            return Ok(());
        }
        let mut policy = QueryPolicy::default();
        if let Some(limit) = limit {
            policy.max_records = limit;
        }
        let mut statement = aerospike::Statement::new(namespace, set.unwrap_or(""), selected);
        if let Some(predicate) = &predicate {
            match self.index_for(namespace, set, predicate)? {
                Some(index) => statement.set_filter(index.filter),
                None => policy.base_policy.filter_expression = Some(filter(predicate)?),
            }
        }
        let mut progress = Progress::new(self.progress, "SELECT");
        let result: Result<(), String> = self.runtime.block_on(async {
            let recordset = self
                .client
                .query(&policy, PartitionFilter::all(), statement)
                .await
                .map_err(|error| format!("SELECT failed: {error}"))?;
            let mut stream = recordset.into_stream();
            while let Some(record) = stream.next().await {
                let record = record.map_err(|error| format!("SELECT failed: {error}"))?;
                output.push(&record);
                progress.update(output.count, "records");
                if limit.is_some_and(|limit| output.count >= limit) {
                    break;
                }
            }
            Ok(())
        });
        progress.finish();
        // Rows already printed stay printed; an error ends the listing.
        output.finish(started);
        result
    }

    fn show(&self, what: ShowWhat) -> Result<(), String> {
        let nodes = info::discover(&self.target.seed(), self.target.timeout)?;
        let command = match what {
            ShowWhat::Namespaces => "namespaces",
            ShowWhat::Sets => "sets",
            ShowWhat::Bins => "bins",
            ShowWhat::Indexes => "sindex-list:",
            ShowWhat::Udfs => "udf-list",
        };
        let mut rows: Vec<Vec<(String, String)>> = Vec::new();
        for node in &nodes {
            let answer = info::value(&node.address, command, self.target.timeout)?;
            let answer = info::check(&answer)?;
            for entry in answer.split(';').filter(|entry| !entry.trim().is_empty()) {
                let row = match what {
                    ShowWhat::Namespaces => vec![("namespace".to_owned(), entry.to_owned())],
                    ShowWhat::Bins => {
                        let (namespace, rest) = entry.split_once(':').unwrap_or((entry, ""));
                        let mut row = vec![("namespace".to_owned(), namespace.to_owned())];
                        row.extend(info::pairs(rest, ','));
                        row
                    }
                    _ => info::pairs(entry, ':'),
                };
                let mut row = row;
                row.insert(0, ("node".to_owned(), node.name.clone()));
                rows.push(row);
            }
        }
        if what == ShowWhat::Namespaces {
            // One row per namespace, with the nodes that serve it.
            let mut merged: Vec<(String, Vec<String>)> = Vec::new();
            for row in &rows {
                let (node, namespace) = (&row[0].1, &row[1].1);
                match merged.iter_mut().find(|(name, _)| name == namespace) {
                    Some((_, nodes)) => nodes.push(node.clone()),
                    None => merged.push((namespace.clone(), vec![node.clone()])),
                }
            }
            rows = merged
                .into_iter()
                .map(|(namespace, nodes)| {
                    vec![
                        ("namespace".to_owned(), namespace),
                        ("nodes".to_owned(), nodes.join(",")),
                    ]
                })
                .collect();
        }
        print_key_value_rows(self.format, &rows);
        Ok(())
    }

    fn truncate(&self, namespace: &str, set: Option<&str>) -> Result<(), String> {
        let seed = self.target.seed();
        let nodes = info::discover(&seed, self.target.timeout)?;
        let count = |nodes: &[info::Node]| -> Result<Count, String> {
            records(nodes, namespace, set, self.target.timeout)
        };
        let before = count(&nodes)?.records;
        self.runtime
            .block_on(self.client.truncate(
                &AdminPolicy::default(),
                namespace,
                set.unwrap_or(""),
                0,
            ))
            .map_err(|error| format!("TRUNCATE failed: {error}"))?;
        let what = match set {
            Some(set) => format!("{namespace}.{set}"),
            None => namespace.to_owned(),
        };
        let mut progress = Progress::new(self.progress, "TRUNCATE");
        let deadline = Instant::now() + TRUNCATE_WAIT;
        loop {
            let left = count(&nodes)?;
            progress.update(
                before.saturating_sub(left.records),
                &format!("of {before} records removed"),
            );
            // Done once every copy, not just the masters, is gone.
            if left.copies == 0 {
                break;
            }
            if Instant::now() > deadline {
                progress.finish();
                println!(
                    "OK, truncating {what}: {} of {before} records still being removed.",
                    left.records
                );
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        progress.finish();
        println!("OK, truncated {what} ({before} records).");
        Ok(())
    }

    fn explain(&self, select: &Statement) -> Result<(), String> {
        let Statement::Select {
            bins,
            namespace,
            set,
            predicate,
            limit,
        } = select
        else {
            return Err("EXPLAIN takes a SELECT".to_owned());
        };
        let mut rows: Vec<(String, String)> = vec![
            ("namespace".into(), namespace.clone()),
            (
                "set".into(),
                set.clone().unwrap_or_else(|| "(all sets)".into()),
            ),
            (
                "bins".into(),
                bins.as_ref().map_or("*".to_owned(), |bins| bins.join(", ")),
            ),
        ];
        match predicate {
            Some(Predicate::Pk(pk)) => {
                let key = Key::new(
                    namespace.clone(),
                    set.clone().unwrap_or_default(),
                    value::to_value(pk),
                )
                .map_err(|error| error.to_string())?;
                let partition = key.partition_id();
                let digest: String = key
                    .digest()
                    .iter()
                    .map(|byte| format!("{byte:02x}"))
                    .collect();
                rows.push((
                    "plan".into(),
                    "PK lookup: one read of one record on its master node".into(),
                ));
                rows.push(("digest".into(), digest));
                rows.push(("partition".into(), partition.to_string()));
                rows.push(("master node".into(), self.master_of(namespace, partition)?));
            }
            Some(predicate) => {
                let (bin, test) = match predicate {
                    Predicate::Equals(bin, value) => (bin, format!("= {}", show_literal(value))),
                    Predicate::Between(bin, low, high) => (
                        bin,
                        format!("BETWEEN {} AND {}", show_literal(low), show_literal(high)),
                    ),
                    Predicate::Pk(_) => unreachable!("handled above"),
                };
                match self.index_for(namespace, set.as_deref(), predicate)? {
                    Some(index) => {
                        rows.push((
                            "plan".into(),
                            "secondary index query: each node reads only the index entries that match".into(),
                        ));
                        rows.push((
                            "index".into(),
                            format!(
                                "{} ({} on bin {bin}, set {})",
                                index.name,
                                index.kind,
                                index.set.as_deref().unwrap_or("(all sets)")
                            ),
                        ));
                    }
                    None => rows.push((
                        "plan".into(),
                        "scan of every partition on every node; each node keeps the records whose bin passes a filter expression (no usable secondary index on the bin)".into(),
                    )),
                }
                rows.push(("filter".into(), format!("{bin} {test}")));
            }
            None => rows.push((
                "plan".into(),
                "scan of every partition on every node".into(),
            )),
        }
        if let Some(limit) = limit {
            rows.push(("limit".into(), limit.to_string()));
        }
        rows.push(("nodes".into(), self.client.nodes().len().to_string()));
        match self.format {
            Format::Json => print_key_value_rows(self.format, &[rows]),
            Format::Table => {
                let mut plan = table(&["", "EXPLAIN"]);
                for (key, value) in rows {
                    plan.add_row(vec![Cell::new(key), Cell::new(value)]);
                }
                println!("{plan}");
            }
        }
        Ok(())
    }

    /// A readable secondary index that answers `predicate` on `namespace`
    /// (and `set`): one on the bin, of the literal's type (NUMERIC for
    /// integers, STRING for a string), over that set or over every set.
    /// None when there is none (or the node cannot say): the caller scans.
    fn index_for(
        &self,
        namespace: &str,
        set: Option<&str>,
        predicate: &Predicate,
    ) -> Result<Option<IndexUse>, String> {
        let (bin, wanted, filter) = match predicate {
            Predicate::Equals(bin, Literal::Int(value)) => {
                (bin, "numeric", Filter::equal(bin.as_str(), *value))
            }
            Predicate::Equals(bin, Literal::Str(value)) => {
                (bin, "string", Filter::equal(bin.as_str(), value.as_str()))
            }
            Predicate::Between(bin, Literal::Int(low), Literal::Int(high)) => {
                (bin, "numeric", Filter::range(bin.as_str(), *low, *high))
            }
            _ => return Ok(None),
        };
        let answer = info::value(
            &self.target.seed(),
            &format!("sindex-list:ns={namespace}"),
            self.target.timeout,
        )?;
        if info::check(&answer).is_err() {
            return Ok(None);
        }
        let found = answer
            .split(';')
            .map(|entry| info::pairs(entry, ':'))
            .find(|fields| {
                let field = |name: &str| {
                    fields
                        .iter()
                        .find(|(key, _)| key == name)
                        .map_or("", |(_, value)| value.as_str())
                };
                let index_set = field("set");
                field("ns") == namespace
                    && field("bin") == bin
                    && field("type").eq_ignore_ascii_case(wanted)
                    && ["default", "none", ""]
                        .contains(&field("indextype").to_ascii_lowercase().as_str())
                    && ["null", ""].contains(&field("context"))
                    && field("state").eq_ignore_ascii_case("RW")
                    && (index_set == "null" || index_set.is_empty() || Some(index_set) == set)
            });
        Ok(found.map(|fields| {
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.clone())
                    .unwrap_or_default()
            };
            let index_set = field("set");
            IndexUse {
                name: field("indexname"),
                kind: wanted,
                set: (index_set != "null" && !index_set.is_empty()).then_some(index_set),
                filter,
            }
        }))
    }

    fn create_index(
        &self,
        name: &str,
        namespace: &str,
        set: Option<&str>,
        bin: &str,
        kind: IndexKind,
    ) -> Result<(), String> {
        let index_type = match kind {
            IndexKind::Numeric => IndexType::Numeric,
            IndexKind::String => IndexType::String,
        };
        self.runtime
            .block_on(self.client.create_index_on_bin(
                &AdminPolicy::default(),
                namespace,
                set.unwrap_or(""),
                bin,
                name,
                index_type,
                CollectionIndexType::Default,
                None,
            ))
            .map_err(|error| format!("CREATE INDEX failed: {error}"))?;
        // Every node builds it from the records it holds: wait until each
        // says it is fully loaded, showing the least loaded node's share.
        let nodes = info::discover(&self.target.seed(), self.target.timeout)?;
        let command = format!("sindex-stat:namespace={namespace};indexname={name}");
        let mut progress = Progress::new(self.progress, "CREATE INDEX");
        let deadline = Instant::now() + INDEX_WAIT;
        loop {
            let mut least = 100;
            for node in &nodes {
                let answer = info::value(&node.address, &command, self.target.timeout)?;
                let loaded = info::pairs(&answer, ';')
                    .into_iter()
                    .find(|(key, _)| key == "load_pct")
                    .and_then(|(_, value)| value.parse::<u64>().ok())
                    .unwrap_or(0);
                least = least.min(loaded);
            }
            progress.status(&format!("{least} % of the records indexed"));
            if least >= 100 {
                break;
            }
            if Instant::now() > deadline {
                progress.finish();
                println!("OK, index {name} created; still being built ({least} %).");
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        progress.finish();
        println!("OK, index {name} created.");
        Ok(())
    }

    fn drop_index(&self, namespace: &str, set: Option<&str>, name: &str) -> Result<(), String> {
        self.runtime
            .block_on(self.client.drop_index(
                &AdminPolicy::default(),
                namespace,
                set.unwrap_or(""),
                name,
            ))
            .map_err(|error| format!("DROP INDEX failed: {error}"))?;
        println!("OK, index {name} dropped.");
        Ok(())
    }

    /// The node whose `replicas-master` bitmap holds `partition`.
    fn master_of(&self, namespace: &str, partition: usize) -> Result<String, String> {
        use base64::Engine;
        for node in info::discover(&self.target.seed(), self.target.timeout)? {
            let answer = info::value(&node.address, "replicas-master", self.target.timeout)?;
            for entry in answer.split(';') {
                let Some((name, bitmap)) = entry.split_once(':') else {
                    continue;
                };
                if name != namespace {
                    continue;
                }
                let bitmap = base64::engine::general_purpose::STANDARD
                    .decode(bitmap)
                    .map_err(|error| {
                        format!("bad replicas-master from {}: {error}", node.address)
                    })?;
                if bitmap
                    .get(partition >> 3)
                    .is_some_and(|byte| byte & (0x80 >> (partition & 7)) != 0)
                {
                    return Ok(format!("{} ({})", node.name, node.address));
                }
            }
        }
        Ok("(none: the partition has no master)".to_owned())
    }
}

/// Records of a namespace or set in the cluster.
struct Count {
    /// Each record counted once.
    records: u64,
    /// Every copy on every node.
    copies: u64,
}

/// Records of a namespace or set in the cluster, each counted once: a
/// namespace's `master_objects` added over the nodes; a set's `objects`
/// (which count every copy) added and divided by the replication factor,
/// exact once migrations are over.
fn records(
    nodes: &[info::Node],
    namespace: &str,
    set: Option<&str>,
    timeout: Duration,
) -> Result<Count, String> {
    let mut total = 0;
    let mut all = 0;
    let mut factor = 1;
    for node in nodes {
        let mut commands = vec![format!("namespace/{namespace}")];
        if let Some(set) = set {
            commands.push(format!("sets/{namespace}/{set}"));
        }
        let asked: Vec<&str> = commands.iter().map(String::as_str).collect();
        let answers = info::request(&node.address, &asked, timeout)?;
        let statistics = answers.get(&commands[0]).map_or("", String::as_str);
        if statistics == "type=unknown" || statistics.starts_with("ERROR") {
            return Err(format!("namespace {namespace} not found"));
        }
        let stat = |text: &str, separator: char, key: &str| {
            info::pairs(text, separator)
                .into_iter()
                .find(|(name, _)| name == key)
                .and_then(|(_, value)| value.parse::<u64>().ok())
        };
        match set {
            None => {
                let objects = stat(statistics, ';', "objects").unwrap_or(0);
                all += objects;
                total += stat(statistics, ';', "master_objects").unwrap_or(objects);
            }
            Some(_) => {
                let sets = answers.get(&commands[1]).map_or("", String::as_str);
                all += stat(sets, ':', "objects").unwrap_or(0);
                factor = stat(statistics, ';', "effective_replication_factor")
                    .unwrap_or(1)
                    .max(1);
            }
        }
    }
    if set.is_some() {
        total = all.div_ceil(factor);
    }
    Ok(Count {
        records: total,
        copies: all,
    })
}

/// A secondary index a SELECT reads, and the filter that reads it.
struct IndexUse {
    name: String,
    kind: &'static str,
    set: Option<String>,
    filter: Filter,
}

fn show_literal(literal: &Literal) -> String {
    match literal {
        Literal::Str(text) => format!("'{text}'"),
        other => value::to_cell(&value::to_value(other)),
    }
}

fn is_not_found(error: &aerospike::Error) -> bool {
    error.to_string().contains("not found") || error.to_string().contains("KeyNotFound")
}

/// `bin = v` or `bin BETWEEN a AND b` as a filter expression. Numbers
/// compare by value whatever the bin holds: an integer bin against the
/// integers in range (`BETWEEN 1.5 AND 3` keeps 2 and 3), a float bin
/// against the bounds as floats; strings and booleans compare as such.
fn filter(predicate: &Predicate) -> Result<Expression, String> {
    match predicate {
        Predicate::Equals(bin, literal @ (Literal::Int(_) | Literal::Float(_))) => {
            Ok(numeric_range(bin, literal, literal))
        }
        Predicate::Equals(bin, Literal::Str(text)) => Ok(exp::eq(
            exp::string_bin(bin.clone()),
            exp::string_val(text.clone()),
        )),
        Predicate::Equals(bin, Literal::Bool(flag)) => {
            Ok(exp::eq(exp::bool_bin(bin.clone()), exp::bool_val(*flag)))
        }
        Predicate::Equals(_, Literal::Json(_)) => {
            Err("WHERE compares numbers, strings or booleans".to_owned())
        }
        Predicate::Between(bin, low, high) => {
            let numeric =
                |literal: &Literal| matches!(literal, Literal::Int(_) | Literal::Float(_));
            if numeric(low) && numeric(high) {
                Ok(numeric_range(bin, low, high))
            } else {
                Err("BETWEEN takes two numbers".to_owned())
            }
        }
        Predicate::Pk(_) => Err("a PK predicate is a lookup, not a filter".to_owned()),
    }
}

/// Integer bins in `[ceil(low), floor(high)]`, float bins in `[low, high]`
/// (`low` and `high` are numbers; integers stay exact).
fn numeric_range(bin: &str, low: &Literal, high: &Literal) -> Expression {
    const INTEGER: i64 = 1;
    const FLOAT: i64 = 2;
    // `as` saturates at i64's bounds.
    let int = |literal: &Literal, round: fn(f64) -> f64| match literal {
        Literal::Int(value) => *value,
        Literal::Float(value) => round(*value) as i64,
        _ => 0,
    };
    let float = |literal: &Literal| match literal {
        Literal::Int(value) => *value as f64,
        Literal::Float(value) => *value,
        _ => 0.0,
    };
    let (int_low, int_high) = (int(low, f64::ceil), int(high, f64::floor));
    let (low, high) = (float(low), float(high));
    let is = |kind: i64| exp::eq(exp::bin_type(bin.to_owned()), exp::int_val(kind));
    exp::or(vec![
        exp::and(vec![
            is(INTEGER),
            exp::ge(exp::int_bin(bin.to_owned()), exp::int_val(int_low)),
            exp::le(exp::int_bin(bin.to_owned()), exp::int_val(int_high)),
        ]),
        exp::and(vec![
            is(FLOAT),
            exp::ge(exp::float_bin(bin.to_owned()), exp::float_val(low)),
            exp::le(exp::float_bin(bin.to_owned()), exp::float_val(high)),
        ]),
    ])
}

/// A record waiting in a table block: its PK cell and its bin cells.
type TableRow = (Option<String>, Vec<(String, String)>);

/// Records as they arrive: a JSON array written element by element, or
/// tables of up to [`TABLE_BLOCK_ROWS`] rows.
struct Rows {
    format: Format,
    bins: Option<Vec<String>>,
    block: Vec<TableRow>,
    count: u64,
    out: std::io::Stdout,
}

impl Rows {
    fn new(format: Format, bins: Option<Vec<String>>) -> Rows {
        Rows {
            format,
            bins,
            block: Vec::new(),
            count: 0,
            out: std::io::stdout(),
        }
    }

    fn push(&mut self, record: &Record) {
        self.push_with_pk(record, None);
    }

    fn push_with_pk(&mut self, record: &Record, asked: Option<aerospike::Value>) {
        let pk = record
            .key
            .as_ref()
            .and_then(|key| key.user_key())
            .cloned()
            .or(asked);
        self.count += 1;
        match self.format {
            Format::Json => {
                let mut object = serde_json::Map::new();
                if let Some(pk) = &pk {
                    object.insert("PK".to_owned(), value::to_json(pk));
                }
                for (name, value) in &record.bins {
                    object.insert(name.clone(), value::to_json(value));
                }
                let separator = if self.count == 1 { "[\n  " } else { ",\n  " };
                let _ = write!(self.out, "{separator}{}", serde_json::Value::Object(object));
                let _ = self.out.flush();
            }
            Format::Table => {
                let bins = record
                    .bins
                    .iter()
                    .map(|(name, value)| (name.clone(), value::to_cell(value)))
                    .collect();
                self.block.push((pk.as_ref().map(value::to_cell), bins));
                if self.block.len() >= TABLE_BLOCK_ROWS {
                    self.flush_block();
                }
            }
        }
    }

    fn flush_block(&mut self) {
        if self.block.is_empty() {
            return;
        }
        let with_pk = self.block.iter().any(|(pk, _)| pk.is_some());
        let mut columns: Vec<String> = Vec::new();
        if with_pk {
            columns.push("PK".to_owned());
        }
        match &self.bins {
            Some(bins) => columns.extend(bins.iter().cloned()),
            None => {
                for (_, bins) in &self.block {
                    for (name, _) in bins {
                        if !columns.iter().skip(usize::from(with_pk)).any(|c| c == name) {
                            columns.push(name.clone());
                        }
                    }
                }
            }
        }
        let header: Vec<&str> = columns.iter().map(String::as_str).collect();
        let mut table = table(&header);
        for (pk, bins) in self.block.drain(..) {
            let mut row = Vec::new();
            for (index, column) in columns.iter().enumerate() {
                if with_pk && index == 0 {
                    row.push(Cell::new(pk.clone().unwrap_or_default()));
                    continue;
                }
                let value = bins
                    .iter()
                    .find(|(name, _)| name == column)
                    .map(|(_, v)| v.clone());
                row.push(Cell::new(value.unwrap_or_default()));
            }
            table.add_row(row);
        }
        let _ = writeln!(self.out, "{table}");
    }

    fn finish(&mut self, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        let summary = format!(
            "{} row{} in set ({seconds:.3} secs)",
            thousands(&self.count.to_string()),
            if self.count == 1 { "" } else { "s" }
        );
        match self.format {
            Format::Json => {
                let _ = writeln!(self.out, "{}", if self.count == 0 { "[]" } else { "\n]" });
                eprintln!("{summary}");
            }
            Format::Table => {
                self.flush_block();
                let _ = writeln!(self.out, "{summary}");
            }
        }
        let _ = self.out.flush();
    }
}

/// Rows of `key=value` fields as a table (columns in first-seen order) or
/// a JSON array of objects.
fn print_key_value_rows(format: Format, rows: &[Vec<(String, String)>]) {
    match format {
        Format::Json => {
            let array: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    serde_json::Value::Object(
                        row.iter()
                            .map(|(key, value)| {
                                (key.clone(), serde_json::Value::String(value.clone()))
                            })
                            .collect(),
                    )
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&array).unwrap_or_default()
            );
        }
        Format::Table => {
            let mut columns: Vec<String> = Vec::new();
            for row in rows {
                for (key, _) in row {
                    if !columns.contains(key) {
                        columns.push(key.clone());
                    }
                }
            }
            if columns.is_empty() {
                println!("0 rows in set");
                return;
            }
            let header: Vec<&str> = columns.iter().map(String::as_str).collect();
            let mut table = table(&header);
            for row in rows {
                table.add_row(columns.iter().map(|column| {
                    Cell::new(
                        row.iter()
                            .find(|(key, _)| key == column)
                            .map_or("", |(_, v)| v.as_str()),
                    )
                }));
            }
            println!("{table}");
            println!(
                "{} row{} in set",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            );
        }
    }
}

/// `bolide sql`: one statement (`-c`), or a prompt until QUIT or end of input.
pub fn run(
    target: &Target,
    command: Option<&str>,
    format: Format,
    progress: bool,
) -> Result<(), String> {
    let mut session = Session::connect(target, format, progress)?;
    if let Some(command) = command {
        let mut failed = None;
        for statement in split_statements(command) {
            match session.execute(&statement) {
                Ok(true) => {}
                Ok(false) => break,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        return failed.map_or(Ok(()), Err);
    }
    repl(&mut session)
}

/// Statements separated by `;` outside quotes.
fn split_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    for c in text.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';') => {
                if !current.trim().is_empty() {
                    statements.push(std::mem::take(&mut current));
                }
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        statements.push(current);
    }
    statements
}

fn repl(session: &mut Session) -> Result<(), String> {
    use rustyline::error::ReadlineError;
    let mut editor = rustyline::DefaultEditor::new().map_err(|error| error.to_string())?;
    let history =
        std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".bolide_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if interactive {
        println!("bolide sql: connected to {} ({} node{}). HELP lists the statements; QUIT or Ctrl-D ends.",
            session.target.seed(), session.client.nodes().len(), if session.client.nodes().len() == 1 { "" } else { "s" });
    }
    let mut failures = 0;
    loop {
        match editor.readline("bolide> ") {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                let mut more = true;
                for statement in split_statements(&line) {
                    match session.execute(&statement) {
                        Ok(true) => {}
                        Ok(false) => more = false,
                        Err(error) => {
                            failures += 1;
                            eprintln!("{error}");
                        }
                    }
                    if !more {
                        break;
                    }
                }
                if !more {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(error) => return Err(error.to_string()),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    // Piped statements: the exit status says whether any failed.
    if !interactive && failures > 0 {
        return Err(format!(
            "{failures} statement{} failed",
            if failures == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}
