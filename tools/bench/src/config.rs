//! Command-line flags, in the spelling Aerospike benchmark users know, and
//! their translation into a validated [`Config`].
//!
//! `-h` is the host list (as in the Aerospike tools), so help is `--help` only.

use crate::workload::Workload;
use clap::{ArgAction, Parser, ValueEnum};
use std::time::Duration;

/// Which wire protocol the load generator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Aerospike,
    Redis,
}

/// One bin's value type and size, from `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinSpec {
    /// 8-byte integer.
    Integer,
    /// UTF-8 string of this many bytes.
    String { bytes: usize },
    /// Blob of this many bytes.
    Blob { bytes: usize },
}

/// How long a run lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Until this much time has passed.
    Duration(Duration),
    /// Until this many operations have been issued.
    Operations(u64),
    /// Until the workload ends by itself (inserts of every key), or Ctrl-C.
    Unbounded,
}

/// Aerospike-style latency columns `<=1ms >1ms >2ms ...` (from `-L COLUMNS,SHIFT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyColumns {
    pub columns: u32,
    pub shift: u32,
}

/// Largest value size `-o S:`/`B:` accepts (the server's default record limit).
pub const VALUE_BYTES_MAX: usize = 1024 * 1024;
/// Largest pipeline depth; bounds the per-connection buffers.
pub const DEPTH_MAX: usize = 4096;
/// Most connections one run opens.
pub const CONCURRENCY_MAX: usize = 10_000;

#[derive(Debug, Parser)]
#[command(
    name = "bolide-bench",
    version,
    disable_help_flag = true,
    about = "Load generator for Bolide, Aerospike and Redis with one workload engine.",
    after_help = "Examples:\n  bolide-bench -h 127.0.0.1 -p 3000 -n test -k 100000 -o S:100 -w I -c 32\n  \
                  bolide-bench -k 100000 -o S:100 -w RU,80 -c 32 --depth 8 -d 30s -L 7,1\n  \
                  bolide-bench --protocol redis -p 6379 -k 100000 -o S:100 -w A -d 10s --json -"
)]
pub struct Args {
    /// Print help.
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,

    /// Protocol to speak.
    #[arg(long, value_enum, default_value_t = Protocol::Aerospike)]
    pub protocol: Protocol,

    /// Server hosts, comma separated (`host` or `host:port`); only the first is used.
    #[arg(short = 'h', long, default_value = "127.0.0.1")]
    pub hosts: String,

    /// Server port [default: 3000 for aerospike, 6379 for redis].
    #[arg(short = 'p', long)]
    pub port: Option<u16>,

    /// Aerospike namespace.
    #[arg(short = 'n', long, default_value = "test")]
    pub namespace: String,

    /// Aerospike set (Redis: key prefix).
    #[arg(short = 's', long, default_value = "testset")]
    pub set: String,

    /// Number of keys.
    #[arg(short = 'k', long, default_value_t = 100_000)]
    pub keys: u64,

    /// First key.
    #[arg(short = 'S', long, default_value_t = 0)]
    pub start_key: u64,

    /// Object spec: I (integer), S:<bytes> (string), B:<bytes> (blob); a comma list gives one bin each.
    #[arg(short = 'o', long = "object-spec", default_value = "I")]
    pub object_spec: String,

    /// Bins per record (each holds the -o object, when -o names one type).
    #[arg(short = 'b', long, default_value_t = 1)]
    pub bins: usize,

    /// Workload: I (insert every key), RU,<read%> (read/update), or YCSB A, B, C, D, E, F.
    #[arg(short = 'w', long, default_value = "RU,50")]
    pub workload: String,

    /// Connections, each driven by its own task.
    #[arg(short = 'c', long, default_value_t = 16)]
    pub concurrency: usize,

    /// Requests written per connection before reading the answers (pipelining).
    #[arg(long, visible_alias = "pipeline", default_value_t = 1)]
    pub depth: usize,

    /// Run length: seconds (`30`, `30s`, `500ms`, `2m`) or an operation count (`100000ops`)
    /// [default: 10s; for -w I until every key is inserted].
    #[arg(short = 'd', long)]
    pub duration: Option<String>,

    /// Target transactions per second over all connections (0 = as fast as possible).
    #[arg(short = 'g', long, default_value_t = 0)]
    pub throughput: u64,

    /// Show latency columns COLUMNS,SHIFT (`<=1ms >1ms >2ms ...`) each second and at the end.
    #[arg(short = 'L', long, num_args = 0..=1, default_missing_value = "7,1")]
    pub latency: Option<String>,

    /// Threads running the connections.
    #[arg(short = 'z', long, default_value_t = 1)]
    pub threads: usize,

    /// Per-request timeout in milliseconds; a late answer counts as a timeout.
    #[arg(short = 'T', long = "timeout", default_value_t = 1000)]
    pub timeout_ms: u64,

    /// Write a JSON summary to FILE (`-` for stdout; the per-second lines then go to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,

    /// Zipfian constant (YCSB default 0.99).
    #[arg(long, default_value_t = 0.99)]
    pub zipfian_constant: f64,

    /// Longest scan of workload E, in records (YCSB maxscanlength).
    #[arg(long, default_value_t = 100)]
    pub scan_length_max: u32,

    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Aerospike cluster: learn the partition map from the seed node and
    /// send each request to its partition's master (refreshed every second).
    #[arg(long)]
    pub cluster: bool,

    /// User to log in as on a secured Aerospike node (each connection logs in).
    #[arg(short = 'U', long)]
    pub user: Option<String>,

    /// Password of -U.
    #[arg(short = 'P', long, default_value = "")]
    pub password: String,

    /// Connect with TLS (Aerospike protocol; the server's tls-port).
    #[arg(long)]
    pub tls_enable: bool,

    /// The name the server's certificate must carry (default: the host).
    #[arg(long)]
    pub tls_name: Option<String>,

    /// The CA certificates (PEM) that sign the server's certificate.
    #[arg(long, value_name = "FILE")]
    pub tls_cafile: Option<std::path::PathBuf>,

    /// This client's certificate (PEM), for a server that asks for one.
    #[arg(long, value_name = "FILE")]
    pub tls_certfile: Option<std::path::PathBuf>,

    /// Its private key (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_keyfile: Option<std::path::PathBuf>,
}

/// A validated run description.
#[derive(Clone, Debug)]
pub struct Config {
    pub protocol: Protocol,
    pub host: String,
    pub port: u16,
    pub namespace: String,
    pub set: String,
    pub key_start: u64,
    pub key_count: u64,
    pub bins: Vec<BinSpec>,
    pub workload: Workload,
    pub workload_text: String,
    pub concurrency: usize,
    pub depth: usize,
    pub limit: Limit,
    pub target_tps: Option<u64>,
    pub latency_columns: Option<LatencyColumns>,
    pub threads: usize,
    pub timeout: Duration,
    pub json: Option<String>,
    pub seed: u64,
    /// Route each request to its partition's master (Aerospike only).
    pub cluster: bool,
    /// Log in on every connection (Aerospike only).
    pub credentials: Option<crate::login::Credentials>,
    /// TLS on every connection (`--tls-enable`).
    pub tls: Option<crate::tls::Tls>,
}

impl Config {
    /// Parses the command line; the error is one line fit for the user.
    pub fn from_args<I, T>(args: I) -> Result<Config, ArgsError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args = Args::try_parse_from(args)?;
        Config::from_parsed(args).map_err(ArgsError::Bad)
    }

    fn from_parsed(args: Args) -> Result<Config, String> {
        let workload = Workload::parse(&args.workload, args.zipfian_constant, args.scan_length_max)
            .map_err(|reason| format!("bad -w '{}': {reason}", args.workload))?;
        let (host, host_port) = parse_hosts(&args.hosts)?;
        let default_port = match args.protocol {
            Protocol::Aerospike => 3000,
            Protocol::Redis => 6379,
        };
        let port = args.port.or(host_port).unwrap_or(default_port);
        let bins = parse_object_spec(&args.object_spec, args.bins)
            .map_err(|reason| format!("bad -o '{}': {reason}", args.object_spec))?;
        let limit = match &args.duration {
            Some(text) => {
                parse_limit(text).map_err(|reason| format!("bad -d '{text}': {reason}"))?
            }
            None if workload.is_load() => Limit::Unbounded,
            None => Limit::Duration(Duration::from_secs(10)),
        };
        let latency_columns = args
            .latency
            .as_deref()
            .map(|text| parse_latency_columns(text).map_err(|r| format!("bad -L '{text}': {r}")))
            .transpose()?;
        check_range("-k", args.keys, 1, u64::MAX / 2)?;
        check_range("-c", args.concurrency as u64, 1, CONCURRENCY_MAX as u64)?;
        check_range("--depth", args.depth as u64, 1, DEPTH_MAX as u64)?;
        check_range("-z", args.threads as u64, 1, 256)?;
        check_range("-T", args.timeout_ms, 1, 3_600_000)?;
        if args.namespace.is_empty()
            || args.namespace.len() > bolide_types::NAMESPACE_NAME_BYTES_MAX
        {
            return Err(format!(
                "bad -n '{}': a namespace name has 1 to {} bytes",
                args.namespace,
                bolide_types::NAMESPACE_NAME_BYTES_MAX
            ));
        }
        if args.set.len() > bolide_types::SET_NAME_BYTES_MAX {
            return Err(format!(
                "bad -s '{}': a set name has at most 63 bytes",
                args.set
            ));
        }
        if args.start_key.checked_add(args.keys).is_none() {
            return Err("-S plus -k overflows".to_string());
        }
        let seed = args.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        if args.cluster && args.protocol != Protocol::Aerospike {
            return Err("--cluster is for Aerospike servers".to_owned());
        }
        let tls = if args.tls_enable {
            if args.protocol != Protocol::Aerospike {
                return Err("--tls-enable is for Aerospike servers".to_owned());
            }
            if args.cluster {
                return Err("--tls-enable with --cluster is not supported yet".to_owned());
            }
            let cafile = args
                .tls_cafile
                .as_deref()
                .ok_or("--tls-enable needs --tls-cafile")?;
            let identity = match (&args.tls_certfile, &args.tls_keyfile) {
                (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
                (None, None) => None,
                _ => return Err("--tls-certfile and --tls-keyfile go together".to_owned()),
            };
            let name = args.tls_name.clone().unwrap_or_else(|| host.clone());
            Some(crate::tls::Tls::new(cafile, &name, identity)?)
        } else {
            if args.tls_cafile.is_some() || args.tls_name.is_some() || args.tls_certfile.is_some() {
                return Err("TLS options given without --tls-enable".to_owned());
            }
            None
        };
        Ok(Config {
            protocol: args.protocol,
            host,
            port,
            namespace: args.namespace,
            set: args.set,
            key_start: args.start_key,
            key_count: args.keys,
            bins,
            workload,
            workload_text: args.workload,
            concurrency: args.concurrency,
            depth: args.depth,
            limit,
            target_tps: (args.throughput > 0).then_some(args.throughput),
            latency_columns,
            threads: args.threads,
            timeout: Duration::from_millis(args.timeout_ms),
            json: args.json,
            seed,
            cluster: args.cluster,
            credentials: match &args.user {
                None => None,
                Some(user) => Some(crate::login::Credentials::new(user, &args.password)?),
            },
            tls,
        })
    }
}

/// Why the command line did not give a [`Config`].
#[derive(Debug)]
pub enum ArgsError {
    /// `--help` or `--version`: print the text to stdout and exit 0.
    Exit(String),
    /// A bad flag or value: one line for the user.
    Bad(String),
}

impl From<clap::Error> for ArgsError {
    fn from(error: clap::Error) -> ArgsError {
        use clap::error::ErrorKind;
        let rendered = error.render().to_string();
        match error.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ArgsError::Exit(rendered),
            _ => {
                let line = rendered
                    .lines()
                    .find(|line| !line.trim().is_empty())
                    .unwrap_or("bad arguments")
                    .trim_start_matches("error: ")
                    .to_string();
                ArgsError::Bad(line)
            }
        }
    }
}

/// The first host of `-h`, and its port if given as `host:port`.
pub fn parse_hosts(text: &str) -> Result<(String, Option<u16>), String> {
    let first = text.split(',').map(str::trim).find(|h| !h.is_empty());
    let Some(first) = first else {
        return Err("bad -h: no host given".to_string());
    };
    match first.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("bad -h '{first}': port '{port}' is not a number 0-65535"))?;
            Ok((host.to_string(), Some(port)))
        }
        _ => Ok((first.to_string(), None)),
    }
}

/// `I`, `S:100`, `B:200`, or a comma list of them; a single spec is
/// repeated `bins` times.
pub fn parse_object_spec(text: &str, bins: usize) -> Result<Vec<BinSpec>, String> {
    let specs = text
        .split(',')
        .map(|part| parse_bin_spec(part.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if bins == 0 || bins > 1000 {
        return Err(format!("-b {bins}: bins must be 1 to 1000"));
    }
    match specs.as_slice() {
        [one] => Ok(vec![*one; bins]),
        _ if bins == 1 => Ok(specs),
        _ => Err("give either a comma list in -o or a bin count in -b, not both".to_string()),
    }
}

fn parse_bin_spec(text: &str) -> Result<BinSpec, String> {
    let (kind, size) = match text.split_once(':') {
        Some((kind, size)) => (kind, Some(size)),
        None => (text, None),
    };
    let bytes = |size: Option<&str>| -> Result<usize, String> {
        let size = size.ok_or_else(|| format!("'{text}' needs a size, e.g. {kind}:100"))?;
        let bytes = size
            .parse::<usize>()
            .map_err(|_| format!("size '{size}' is not a number"))?;
        if bytes == 0 || bytes > VALUE_BYTES_MAX {
            return Err(format!("size {bytes} is outside 1..={VALUE_BYTES_MAX}"));
        }
        Ok(bytes)
    };
    match kind.to_ascii_uppercase().as_str() {
        "I" if size.is_none() => Ok(BinSpec::Integer),
        "S" => Ok(BinSpec::String {
            bytes: bytes(size)?,
        }),
        "B" => Ok(BinSpec::Blob {
            bytes: bytes(size)?,
        }),
        _ => Err(format!(
            "unknown object '{text}': expected I, S:<bytes> or B:<bytes>"
        )),
    }
}

/// `30`, `30s`, `500ms`, `2m`, `1h` or `100000ops`.
pub fn parse_limit(text: &str) -> Result<Limit, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if unit == "ops" {
        let count = number
            .parse::<u64>()
            .map_err(|_| "expected a whole number of operations".to_string())?;
        if count == 0 {
            return Err("operation count must be at least 1".to_string());
        }
        return Ok(Limit::Operations(count));
    }
    let value = number
        .parse::<f64>()
        .map_err(|_| "expected seconds (30, 30s, 500ms, 2m) or operations (100000ops)")?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("unknown unit '{other}' (use ms, s, m, h or ops)")),
    };
    if !(seconds > 0.0 && seconds <= 7.0 * 86400.0) {
        return Err("duration must be above 0 and at most 7 days".to_string());
    }
    Ok(Limit::Duration(Duration::from_secs_f64(seconds)))
}

/// `COLUMNS,SHIFT` like Aerospike's `-L 7,1`.
pub fn parse_latency_columns(text: &str) -> Result<LatencyColumns, String> {
    let mut parts = text.split(',');
    let columns = parts
        .next()
        .and_then(|c| c.trim().parse::<u32>().ok())
        .ok_or("expected COLUMNS,SHIFT such as 7,1")?;
    let shift = match parts.next() {
        Some(s) => s
            .trim()
            .parse::<u32>()
            .map_err(|_| "SHIFT is not a number")?,
        None => 1,
    };
    if parts.next().is_some() {
        return Err("expected COLUMNS,SHIFT such as 7,1".to_string());
    }
    if !(2..=16).contains(&columns) || !(1..=4).contains(&shift) || (columns - 2) * shift > 20 {
        return Err("COLUMNS must be 2-16 and SHIFT 1-4, up to 2^20 ms".to_string());
    }
    Ok(LatencyColumns { columns, shift })
}

fn check_range(flag: &str, value: u64, low: u64, high: u64) -> Result<(), String> {
    if value < low || value > high {
        return Err(format!("bad {flag} {value}: must be {low} to {high}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Distribution;

    fn parse(line: &str) -> Result<Config, String> {
        match Config::from_args(std::iter::once("bolide-bench").chain(line.split_whitespace())) {
            Ok(config) => Ok(config),
            Err(ArgsError::Bad(line)) => Err(line),
            Err(ArgsError::Exit(text)) => panic!("unexpected help: {text}"),
        }
    }

    #[test]
    fn aerospike_style_flags() {
        let config = parse(
            "-h 10.0.0.1,10.0.0.2 -p 3100 -n bar -s demo -k 5000 -o S:100 -b 3 -w RU,80 -c 8 \
             --depth 4 -d 5s -g 1000 -L 7,1 -z 2 -T 50",
        )
        .expect("valid flags");
        assert_eq!(config.host, "10.0.0.1");
        assert_eq!(config.port, 3100);
        assert_eq!(config.namespace, "bar");
        assert_eq!(config.set, "demo");
        assert_eq!(config.key_count, 5000);
        assert_eq!(config.bins, vec![BinSpec::String { bytes: 100 }; 3]);
        assert_eq!(config.workload.mix.read_percent, 80);
        assert_eq!(config.workload.mix.update_percent, 20);
        assert_eq!(config.concurrency, 8);
        assert_eq!(config.depth, 4);
        assert_eq!(config.limit, Limit::Duration(Duration::from_secs(5)));
        assert_eq!(config.target_tps, Some(1000));
        assert_eq!(
            config.latency_columns,
            Some(LatencyColumns {
                columns: 7,
                shift: 1
            })
        );
        assert_eq!(config.threads, 2);
        assert_eq!(config.timeout, Duration::from_millis(50));
    }

    #[test]
    fn defaults_and_protocol_ports() {
        let config = parse("").expect("defaults");
        assert_eq!(config.protocol, Protocol::Aerospike);
        assert_eq!(config.port, 3000);
        assert_eq!(config.bins, vec![BinSpec::Integer]);
        assert_eq!(config.limit, Limit::Duration(Duration::from_secs(10)));
        assert_eq!(config.latency_columns, None);
        let config = parse("--protocol redis -h localhost:7000").expect("redis");
        assert_eq!(config.port, 7000);
        assert_eq!(parse("--protocol redis").expect("redis").port, 6379);
        let config = parse("-w I -L").expect("insert");
        assert_eq!(config.limit, Limit::Unbounded);
        assert_eq!(config.latency_columns.map(|l| l.columns), Some(7));
    }

    #[test]
    fn ycsb_workloads_and_limits() {
        let config = parse("-w D -d 100000ops").expect("D");
        assert_eq!(config.workload.distribution, Distribution::Latest);
        assert_eq!(config.limit, Limit::Operations(100_000));
        assert_eq!(
            parse_limit("500ms"),
            Ok(Limit::Duration(Duration::from_millis(500)))
        );
        assert_eq!(
            parse_limit("2m"),
            Ok(Limit::Duration(Duration::from_secs(120)))
        );
        assert_eq!(
            parse_limit("7"),
            Ok(Limit::Duration(Duration::from_secs(7)))
        );
        assert_eq!(
            parse_object_spec("I,S:10,B:20", 1),
            Ok(vec![
                BinSpec::Integer,
                BinSpec::String { bytes: 10 },
                BinSpec::Blob { bytes: 20 }
            ])
        );
    }

    #[test]
    fn bad_flags_give_one_clear_line() {
        for (line, expected) in [
            ("-o X:5", "bad -o 'X:5': unknown object"),
            ("-o S", "bad -o 'S': 'S' needs a size"),
            ("-w RU,120", "bad -w 'RU,120'"),
            ("-w Q", "bad -w 'Q'"),
            ("-d 5parsecs", "bad -d '5parsecs': unknown unit"),
            ("-c 0", "bad -c 0"),
            ("-L 99", "bad -L '99'"),
            ("-h host:notaport", "bad -h 'host:notaport'"),
            ("--no-such-flag", "unexpected argument '--no-such-flag'"),
            ("-k many", "invalid value 'many'"),
        ] {
            let error = parse(line).expect_err(line);
            assert!(error.contains(expected), "{line}: got '{error}'");
            assert!(!error.contains('\n'), "{line}: more than one line: {error}");
        }
    }

    #[test]
    fn help_is_long_only() {
        let outcome = Args::try_parse_from(["bolide-bench", "--help"]).map(|_| ());
        let error = outcome.expect_err("help exits");
        assert_eq!(error.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(parse("-h somehost").is_ok());
    }
}
