//! The server and connection commands of a session (CLIENT, CONFIG,
//! INFO, SLOWLOG, COMMAND, CLUSTER): what they answer about the node and
//! its connections, apart from the dispatcher in `session`.

use super::*;

impl Session {
    /// Logs the command in the slow log if it took long enough.
    pub(super) fn slowlog(&self, spec: &Spec, args: &[Vec<u8>], started: Instant) {
        let threshold = self.shared.slowlog_slower_than_us.load(Relaxed);
        let micros = started.elapsed().as_micros() as u64;
        if threshold < 0 || (micros as i64) < threshold {
            return;
        }
        if matches!(spec.name, "exec" | "auth" | "hello") {
            return;
        }
        const ARGS_MAX: usize = 32;
        const ARG_BYTES_MAX: usize = 128;
        let mut logged: Vec<Vec<u8>> = Vec::new();
        for (index, arg) in args.iter().enumerate() {
            if index == ARGS_MAX - 1 && args.len() > ARGS_MAX {
                logged.push(format!("... ({} more arguments)", args.len() - index).into_bytes());
                break;
            }
            if arg.len() > ARG_BYTES_MAX {
                let mut cut = arg[..ARG_BYTES_MAX].to_vec();
                cut.extend_from_slice(
                    format!("... ({} more bytes)", arg.len() - ARG_BYTES_MAX).as_bytes(),
                );
                logged.push(cut);
            } else {
                logged.push(arg.clone());
            }
        }
        let max = self.shared.slowlog_max_len.load(Relaxed);
        let mut log = self.shared.slowlog.lock();
        log.push_front(SlowEntry {
            id: self.shared.slowlog_next_id.fetch_add(1, Relaxed),
            unix_seconds: crate::keyspace::now_ms() / 1000,
            micros,
            args: logged,
            peer: self.peer.clone(),
            name: self.name.clone(),
        });
        log.truncate(max);
    }

    /// `LATENCY HISTOGRAM [command …]` from the command counters; the
    /// latency monitor's events (LATEST, HISTORY, RESET, DOCTOR) are
    /// empty: Bolide samples no event latencies.
    pub(super) fn latency_command(&self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match sub.as_str() {
            "histogram" => {
                let wanted: Vec<String> = args[2..]
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                    .collect();
                let histograms = self.shared.latency_histograms(&wanted);
                out.map(histograms.len());
                for (name, buckets) in histograms {
                    out.bulk(name.as_bytes());
                    out.map(2);
                    out.bulk(b"calls");
                    out.int(buckets.iter().sum::<u64>() as i64);
                    out.bulk(b"histogram_usec");
                    // Cumulative counts at each power-of-two bound that
                    // has calls, as Redis reports them.
                    let used: Vec<usize> = (0..buckets.len()).filter(|&i| buckets[i] > 0).collect();
                    out.map(used.len());
                    let mut total = 0;
                    for (i, count) in buckets.iter().enumerate() {
                        total += count;
                        if *count > 0 {
                            out.int(1i64 << (i + 1));
                            out.int(total as i64);
                        }
                    }
                }
            }
            "latest" if args.len() == 2 => out.array(0),
            "history" if args.len() == 3 => out.array(0),
            "reset" => out.int(0),
            "doctor" if args.len() == 2 => out.verbatim(
                b"Dave, no latency spike was observed during the lifetime of this instance, \
                  as far as Bolide's latency monitor can tell: it samples no events.\n",
            ),
            "help" if args.len() == 2 => {
                let lines = [
                    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "DOCTOR",
                    "HISTOGRAM [COMMAND ...]",
                    "HISTORY <event>",
                    "LATEST",
                    "RESET [<event> ...]",
                    "HELP",
                ];
                out.array(lines.len());
                for line in lines {
                    out.simple(line);
                }
            }
            "latest" | "history" | "doctor" | "help" => {
                return Err(format!(
                    "ERR wrong number of arguments for 'latency|{sub}' command"
                ))
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try LATENCY HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    pub(super) fn slowlog_command(&self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match sub.as_str() {
            "get" if args.len() <= 3 => {
                let count = match args.get(2) {
                    None => 10,
                    Some(arg) => match parse_i64(arg) {
                        Ok(n) if n >= -1 => n,
                        _ => {
                            return Err("ERR count should be greater than or equal to -1".to_owned())
                        }
                    },
                };
                let log = self.shared.slowlog.lock();
                let take = if count < 0 {
                    log.len()
                } else {
                    (count as usize).min(log.len())
                };
                out.array(take);
                for entry in log.iter().take(take) {
                    out.array(6);
                    out.int(entry.id as i64);
                    out.int(entry.unix_seconds as i64);
                    out.int(entry.micros as i64);
                    out.array(entry.args.len());
                    for arg in &entry.args {
                        out.bulk(arg);
                    }
                    out.bulk(entry.peer.as_bytes());
                    out.bulk(&entry.name);
                }
            }
            "len" if args.len() == 2 => out.int(self.shared.slowlog.lock().len() as i64),
            "reset" if args.len() == 2 => {
                self.shared.slowlog.lock().clear();
                out.ok();
            }
            "help" => {
                let lines = [
                    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "GET [<count>]",
                    "LEN",
                    "RESET",
                    "HELP",
                ];
                out.array(lines.len());
                for line in lines {
                    out.simple(line);
                }
            }
            "get" | "len" | "reset" => {
                return Err(format!(
                    "ERR wrong number of arguments for 'slowlog|{sub}' command"
                ))
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try SLOWLOG HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    /// `CLUSTER …` on a node that answers as a Redis Cluster node.
    pub(super) fn cluster_command(
        &mut self,
        args: &[Vec<u8>],
        out: &mut Out,
        db: &mut Db<'_>,
    ) -> Result<(), String> {
        let Some(map) = self.cluster.clone() else {
            return Err("ERR This instance has cluster support disabled".to_owned());
        };
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let arity = |n: usize| -> Result<(), String> {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "ERR wrong number of arguments for 'cluster|{sub}' command"
                ))
            }
        };
        match sub.as_str() {
            "slots" => {
                arity(2)?;
                map.slots(out);
            }
            "shards" => {
                arity(2)?;
                map.shards(out);
            }
            "nodes" => {
                arity(2)?;
                out.verbatim(map.nodes_text().as_bytes());
            }
            "info" => {
                arity(2)?;
                out.verbatim(map.info_text().as_bytes());
            }
            "myid" => {
                arity(2)?;
                out.bulk(map.my_id().as_bytes());
            }
            "keyslot" => {
                arity(3)?;
                out.int(crate::cluster::key_slot(&args[2]) as i64);
            }
            "countkeysinslot" | "getkeysinslot" => {
                arity(if sub == "countkeysinslot" { 3 } else { 4 })?;
                let slot = parse_i64(&args[2])
                    .ok()
                    .filter(|slot| (0..crate::cluster::SLOTS as i64).contains(slot))
                    .ok_or_else(|| "ERR Invalid slot".to_owned())?
                    as usize;
                let limit = match args.get(3) {
                    Some(count) => parse_i64(count)
                        .ok()
                        .filter(|&n| n >= 0)
                        .ok_or_else(|| "ERR Invalid number of keys".to_owned())?
                        as usize,
                    None => usize::MAX,
                };
                // This node's copy of the slot's partition (empty where it
                // holds none), as Redis counts its own slots.
                let mut keys = db
                    .partition_keys(crate::cluster::slot_partition(slot), &mut |key, _| {
                        crate::cluster::key_slot(key) == slot
                    });
                if sub == "countkeysinslot" {
                    out.int(keys.len() as i64);
                } else {
                    keys.sort();
                    keys.truncate(limit);
                    out.array(keys.len());
                    for key in &keys {
                        out.bulk(key);
                    }
                }
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    pub(super) fn client(&mut self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        let arity = |n: usize, exact: bool| -> Result<(), String> {
            if (exact && args.len() != n) || (!exact && args.len() < n) {
                Err(format!(
                    "ERR wrong number of arguments for 'client|{sub}' command"
                ))
            } else {
                Ok(())
            }
        };
        match sub.as_str() {
            "id" => {
                arity(2, true)?;
                out.int(self.id as i64);
            }
            "setname" => {
                arity(3, true)?;
                check_name(&args[2])?;
                self.name = args[2].clone();
                self.register();
                out.ok();
            }
            "getname" => {
                arity(2, true)?;
                if self.name.is_empty() {
                    out.null();
                } else {
                    out.bulk(&self.name);
                }
            }
            "setinfo" => {
                arity(4, true)?;
                let attribute = String::from_utf8_lossy(&args[2]).to_ascii_lowercase();
                let value = &args[3];
                if value
                    .iter()
                    .any(|&b| b == b' ' || b == b'\n' || !(b'!'..=b'~').contains(&b))
                {
                    return Err(format!(
                        "ERR {} cannot contain spaces, newlines or special characters.",
                        attribute.to_ascii_uppercase()
                    ));
                }
                match attribute.as_str() {
                    // Accepted (clients send them); Redis 7.0's CLIENT
                    // LIST has no place for them.
                    "lib-name" | "lib-ver" => {}
                    _ => {
                        return Err(format!(
                            "ERR Unrecognized option '{}'",
                            String::from_utf8_lossy(&args[2])
                        ))
                    }
                }
                self.register();
                out.ok();
            }
            "info" => {
                arity(2, true)?;
                let line = format!("{}\n", self.client_line());
                out.verbatim(line.as_bytes());
            }
            "list" => {
                // CLIENT LIST [TYPE type] | [ID id ...], as Redis 7.0: one
                // filter or none; IDs in the order given, unknown ones left
                // out.
                let mut kind = None;
                let mut ids = None;
                if args.len() > 3 && args[2].eq_ignore_ascii_case(b"id") {
                    let mut list = Vec::with_capacity(args.len() - 3);
                    for arg in &args[3..] {
                        let id = parse_i64(arg).map_err(|_| "ERR Invalid client ID".to_owned())?;
                        list.push(id as u64);
                    }
                    ids = Some(list);
                } else if args.len() == 4 && args[2].eq_ignore_ascii_case(b"type") {
                    let name = String::from_utf8_lossy(&args[3]).to_ascii_lowercase();
                    if !matches!(
                        name.as_str(),
                        "normal" | "master" | "replica" | "slave" | "pubsub"
                    ) {
                        return Err(format!(
                            "ERR Unknown client type '{}'",
                            String::from_utf8_lossy(&args[3])
                        ));
                    }
                    kind = Some(name);
                } else if args.len() != 2 {
                    return Err("ERR syntax error".to_owned());
                }
                self.register();
                let clients = self.shared.clients.lock();
                let mut text = String::new();
                let mut add = |line: &str| {
                    text.push_str(line);
                    text.push('\n');
                };
                match (ids, kind) {
                    (Some(ids), _) => {
                        for id in ids {
                            if let Some(line) = clients.get(&id) {
                                add(line);
                            }
                        }
                    }
                    (None, Some(kind)) => {
                        for line in clients.values() {
                            // This node has no replication links: every
                            // client is normal or pub/sub.
                            let pubsub = ["sub=", "psub=", "ssub="].iter().any(|field| {
                                line.split(' ')
                                    .find_map(|pair| pair.strip_prefix(field))
                                    .is_some_and(|count| count != "0")
                            });
                            let wanted = match kind.as_str() {
                                "pubsub" => pubsub,
                                "normal" => !pubsub,
                                _ => false,
                            };
                            if wanted {
                                add(line);
                            }
                        }
                    }
                    (None, None) => {
                        for line in clients.values() {
                            add(line);
                        }
                    }
                }
                drop(clients);
                out.verbatim(text.as_bytes());
            }
            "kill" => {
                arity(3, false)?;
                return self.client_kill(args, out);
            }
            "unblock" => {
                arity(3, false)?;
                if args.len() > 4 {
                    return Err("ERR syntax error".to_owned());
                }
                let id = parse_i64(&args[2])?;
                let error = match args.get(3).map(|a| a.to_ascii_lowercase()) {
                    None => false,
                    Some(mode) if mode == b"timeout" => false,
                    Some(mode) if mode == b"error" => true,
                    Some(_) => {
                        return Err(
                            "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".to_owned()
                        )
                    }
                };
                let mut blocked = self.shared.blocked.lock();
                match blocked.get_mut(&(id as u64)) {
                    Some(request) => {
                        *request = Some(error);
                        out.int(1);
                    }
                    None => out.int(0),
                }
            }
            "pause" => {
                arity(3, false)?;
                let millis = parse_i64(&args[2])
                    .ok()
                    .filter(|&ms| ms >= 0)
                    .ok_or_else(|| "ERR timeout is not an integer or out of range".to_owned())?;
                let all = match args.get(3).map(|a| a.to_ascii_lowercase()) {
                    None => true,
                    Some(mode) if mode == b"all" => true,
                    Some(mode) if mode == b"write" => false,
                    Some(_) => return Err("ERR syntax error".to_owned()),
                };
                if args.len() > 4 {
                    return Err("ERR syntax error".to_owned());
                }
                let until = Instant::now() + Duration::from_millis(millis as u64);
                let mut pause = self.shared.pause.lock();
                // A second pause extends, and ALL wins over WRITE.
                *pause = Some(match *pause {
                    Some((at, was_all)) => (at.max(until), was_all || all),
                    None => (until, all),
                });
                out.ok();
            }
            "unpause" => {
                arity(2, true)?;
                *self.shared.pause.lock() = None;
                out.ok();
            }
            "reply" => {
                arity(3, true)?;
                match args[2].to_ascii_lowercase().as_slice() {
                    b"on" => {
                        self.reply = Reply::On;
                        out.ok();
                    }
                    b"off" => self.reply = Reply::Off,
                    b"skip" => self.reply = Reply::SkipNext,
                    _ => return Err("ERR syntax error".to_owned()),
                }
            }
            "no-evict" | "no-touch" | "tracking" => {
                out.ok();
            }
            "help" => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "ID",
                    "GETNAME",
                    "SETNAME <name>",
                    "SETINFO <option> <value>",
                    "INFO",
                    "LIST",
                    "HELP",
                ];
                out.array(lines.len());
                for line in lines {
                    out.simple(line);
                }
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    /// `CLIENT KILL addr` (old form) or `CLIENT KILL <filter> <value> …`
    /// with ID, ADDR, LADDR, USER, SKIPME and TYPE.
    pub(super) fn client_kill(&mut self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let clients: Vec<(u64, String)> = self
            .shared
            .clients
            .lock()
            .iter()
            .map(|(id, line)| (*id, line.clone()))
            .collect();
        let field = |line: &str, name: &str| -> String {
            line.split(' ')
                .find_map(|part| part.strip_prefix(name))
                .unwrap_or_default()
                .to_owned()
        };
        let mut victims: Vec<u64> = Vec::new();
        let old_form = args.len() == 3;
        if old_form {
            let addr = String::from_utf8_lossy(&args[2]).into_owned();
            victims.extend(
                clients
                    .iter()
                    .filter(|(_, line)| field(line, "addr=") == addr)
                    .map(|(id, _)| *id),
            );
            if victims.is_empty() {
                return Err("ERR No such client".to_owned());
            }
        } else {
            if !(args.len() - 2).is_multiple_of(2) {
                return Err("ERR syntax error".to_owned());
            }
            let mut skip_me = true;
            let mut filters: Vec<(String, String)> = Vec::new();
            for pair in args[2..].chunks(2) {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                let value = String::from_utf8_lossy(&pair[1]).into_owned();
                match name.as_str() {
                    "id" => {
                        let id = parse_i64(&pair[1])
                            .ok()
                            .filter(|&id| id > 0)
                            .ok_or_else(|| "ERR client-id should be greater than 0".to_owned())?;
                        filters.push(("id=".to_owned(), id.to_string()));
                    }
                    "addr" => filters.push(("addr=".to_owned(), value)),
                    "laddr" => filters.push(("laddr=".to_owned(), value)),
                    "user" => {
                        let known = value == "default"
                            || clients
                                .iter()
                                .any(|(_, line)| field(line, "user=") == value);
                        if !known {
                            return Err(format!("ERR No such user '{value}'"));
                        }
                        filters.push(("user=".to_owned(), value));
                    }
                    "type" => match value.to_ascii_lowercase().as_str() {
                        "normal" | "pubsub" => {}
                        "master" | "replica" | "slave" => {
                            filters.push(("type=".to_owned(), String::new()))
                        }
                        _ => {
                            return Err(format!("ERR Unknown client type '{value}'"));
                        }
                    },
                    "skipme" => match value.to_ascii_lowercase().as_str() {
                        "yes" => skip_me = true,
                        "no" => skip_me = false,
                        _ => return Err("ERR syntax error".to_owned()),
                    },
                    _ => return Err("ERR syntax error".to_owned()),
                }
            }
            victims.extend(
                clients
                    .iter()
                    .filter(|(id, line)| {
                        !(skip_me && *id == self.id)
                            && filters
                                .iter()
                                .all(|(name, value)| name != "type=" && field(line, name) == *value)
                    })
                    .map(|(id, _)| *id),
            );
        }
        let mut close_self = false;
        for id in &victims {
            if *id == self.id {
                close_self = true;
                continue;
            }
            self.shared.killed.lock().insert(*id);
            if let Some(wake) = self.shared.wakers.lock().get(id) {
                wake.wake();
            }
        }
        if old_form {
            out.ok();
        } else {
            out.int(victims.len() as i64);
        }
        if close_self {
            self.shared.killed.lock().insert(self.id);
        }
        Ok(())
    }

    pub(super) fn config(&mut self, args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
        let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
        match sub.as_str() {
            "get" => {
                if args.len() < 3 {
                    return Err("ERR wrong number of arguments for 'config|get' command".to_owned());
                }
                let config = self.shared.config.lock();
                let mut found: Vec<(&String, &String)> = Vec::new();
                for pattern in &args[2..] {
                    let pattern = pattern.to_ascii_lowercase();
                    for (name, value) in config.iter() {
                        if glob(&pattern, name.as_bytes()) && !found.iter().any(|(n, _)| *n == name)
                        {
                            found.push((name, value));
                        }
                    }
                }
                out.map(found.len());
                for (name, value) in found {
                    out.bulk(name.as_bytes());
                    out.bulk(value.as_bytes());
                }
            }
            "set" => {
                if args.len() < 4 || !args.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'config|set' command".to_owned());
                }
                let mut config = self.shared.config.lock();
                let mut seen: Vec<String> = Vec::new();
                for pair in args[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    let alias = config_alias(&name).map(str::to_owned);
                    if seen.contains(&name) || alias.as_ref().is_some_and(|a| seen.contains(a)) {
                        return Err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"));
                    }
                    seen.push(name.clone());
                    if IMMUTABLE_CONFIG.contains(&name.as_str()) {
                        return Err(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
                        ));
                    }
                    if !config.contains_key(&name) {
                        return Err(format!(
                            "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                            String::from_utf8_lossy(&pair[0])
                        ));
                    }
                    if NUMERIC_CONFIG.contains(&name.as_str())
                        && parse_memory(&String::from_utf8_lossy(&pair[1])).is_none()
                    {
                        return Err(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                             argument couldn't be parsed into an integer"
                        ));
                    }
                }
                for pair in args[2..].chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    let value = String::from_utf8_lossy(&pair[1]).into_owned();
                    // Redis 7.0's listpack names and their ziplist aliases
                    // are one setting.
                    if let Some(alias) = config_alias(&name) {
                        config.insert(alias.to_owned(), value.clone());
                    }
                    config.insert(name, value);
                }
                *self.shared.encodings.write() = encodings_of(&config);
                let number = |name: &str| config.get(name).and_then(|v| parse_memory(v));
                if let Some(us) = number("slowlog-log-slower-than") {
                    self.shared.slowlog_slower_than_us.store(us, Relaxed);
                }
                if let Some(len) = number("slowlog-max-len") {
                    self.shared
                        .slowlog_max_len
                        .store(len.max(0) as usize, Relaxed);
                    let mut log = self.shared.slowlog.lock();
                    log.truncate(len.max(0) as usize);
                }
                out.ok();
            }
            "resetstat" => {
                self.shared.reset_command_stats();
                out.ok();
            }
            "rewrite" => out.ok(),
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    truncate(&String::from_utf8_lossy(&args[1]))
                ))
            }
        }
        Ok(())
    }

    pub(super) fn info(&self, args: &[Vec<u8>], db: &mut Db<'_>) -> String {
        let wanted: Vec<String> = args[1..]
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| matches!(w.as_str(), "all" | "default" | "everything"));
        let want = |section: &str| all || wanted.iter().any(|w| w == section);
        let mut text = String::new();
        let uptime = self.shared.started.elapsed().as_secs();
        if want("server") {
            text.push_str(&format!(
                "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
                 redis_build_id:0\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\n\
                 server_name:bolide\r\nbolide_version:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\n\
                 uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nexecutable:bolided\r\n\r\n",
                std::env::consts::OS,
                std::env::consts::ARCH,
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.shared.run_id,
                self.shared.port,
                uptime / 86400,
            ));
        }
        if want("clients") {
            text.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\nblocked_clients:{}\r\ntracking_clients:0\r\n\r\n",
                self.shared.clients.lock().len(),
                self.shared.blocked.lock().len()
            ));
        }
        if want("memory") {
            let used = db
                .records
                .store()
                .namespace(db.namespace)
                .map_or(0, |ns| ns.memory_used_bytes());
            text.push_str(&format!(
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\nmaxmemory:0\r\n\
                 maxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\n\r\n",
                used as f64 / (1 << 20) as f64
            ));
        }
        if want("persistence") {
            text.push_str("# Persistence\r\nloading:0\r\nasync_loading:0\r\naof_enabled:0\r\nrdb_changes_since_last_save:0\r\n\r\n");
        }
        if want("stats") {
            text.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
                 instantaneous_ops_per_sec:0\r\nexpired_keys:0\r\nevicted_keys:0\r\nkeyspace_hits:0\r\n\
                 keyspace_misses:0\r\nmigrate_cached_sockets:0\r\n\r\n",
                self.shared.connections_received.load(Relaxed),
                self.shared.commands_processed.load(Relaxed),
            ));
        }
        if want("replication") {
            text.push_str(
                "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n\r\n",
            );
        }
        if want("cpu") {
            let (user, system) = process_cpu_seconds();
            text.push_str(&format!(
                "# CPU\r\nused_cpu_sys:{system:.6}\r\nused_cpu_user:{user:.6}\r\n\
                 used_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n\r\n"
            ));
        }
        if want("modules") {
            text.push_str("# Modules\r\n\r\n");
        }
        // Not among the default sections: asked by name, or with all or
        // everything.
        if wanted
            .iter()
            .any(|w| matches!(w.as_str(), "commandstats" | "all" | "everything"))
        {
            text.push_str("# Commandstats\r\n");
            text.push_str(&self.shared.command_stats_text());
            text.push_str("\r\n");
        }
        if want("errorstats") {
            text.push_str("# Errorstats\r\n\r\n");
        }
        if want("cluster") {
            text.push_str(if self.cluster.is_some() {
                "# Cluster\r\ncluster_enabled:1\r\n\r\n"
            } else {
                "# Cluster\r\ncluster_enabled:0\r\n\r\n"
            });
        }
        if want("keyspace") {
            text.push_str("# Keyspace\r\n");
            for index in 0..DATABASES {
                let mut other = Db {
                    records: &mut *db.records,
                    namespace: db.namespace,
                    set: set_name(index),
                    encodings: db.encodings,
                    memo: Default::default(),
                };
                let keys = data::count_keys(&mut other);
                if keys > 0 {
                    text.push_str(&format!("db{index}:keys={keys},expires=0,avg_ttl=0\r\n"));
                }
            }
            text.push_str("\r\n");
        }
        while text.ends_with("\r\n\r\n") {
            text.truncate(text.len() - 2);
        }
        text
    }
}

/// The node process's user and system CPU time in seconds (from
/// /proc/self/stat; zeros where it cannot be read).
fn process_cpu_seconds() -> (f64, f64) {
    const TICKS_PER_SECOND: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the parenthesised command name: state is the 3rd
    // field, utime the 14th and stime the 15th.
    let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
        return (0.0, 0.0);
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / TICKS_PER_SECOND
    };
    (tick(11), tick(12))
}

/// Settings CONFIG GET shows that CONFIG SET may not change.
const IMMUTABLE_CONFIG: &[&str] = &["daemonize", "databases", "io-threads", "port"];

/// Settings whose values are numbers (with Redis's k/m/g units).
const NUMERIC_CONFIG: &[&str] = &[
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "hash-max-ziplist-entries",
    "hash-max-ziplist-value",
    "zset-max-listpack-entries",
    "zset-max-listpack-value",
    "zset-max-ziplist-entries",
    "zset-max-ziplist-value",
    "set-max-intset-entries",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "proto-max-bulk-len",
    "maxmemory",
];

/// The other name of a setting Redis 7.0 knows by two names.
fn config_alias(name: &str) -> Option<&'static str> {
    Some(match name {
        "hash-max-listpack-entries" => "hash-max-ziplist-entries",
        "hash-max-ziplist-entries" => "hash-max-listpack-entries",
        "hash-max-listpack-value" => "hash-max-ziplist-value",
        "hash-max-ziplist-value" => "hash-max-listpack-value",
        "zset-max-listpack-entries" => "zset-max-ziplist-entries",
        "zset-max-ziplist-entries" => "zset-max-listpack-entries",
        "zset-max-listpack-value" => "zset-max-ziplist-value",
        "zset-max-ziplist-value" => "zset-max-listpack-value",
        "list-max-listpack-size" => "list-max-ziplist-size",
        "list-max-ziplist-size" => "list-max-listpack-size",
        "busy-reply-threshold" => "lua-time-limit",
        "lua-time-limit" => "busy-reply-threshold",
        _ => return None,
    })
}

/// A number as CONFIG SET takes it: digits with an optional k/kb/m/mb/g/gb
/// unit (powers of 1000 without the b, 1024 with), possibly negative.
pub(crate) fn parse_memory(text: &str) -> Option<i64> {
    let lower = text.to_ascii_lowercase();
    let (digits, unit) = match lower.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => lower.split_at(at),
        None => (lower.as_str(), ""),
    };
    let scale: i64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    digits.parse::<i64>().ok()?.checked_mul(scale)
}

fn encodings_of(config: &BTreeMap<String, String>) -> crate::keyspace::Encodings {
    let mut limits = crate::keyspace::Encodings::default();
    let number = |name: &str, default: usize| {
        config
            .get(name)
            .and_then(|value| parse_memory(value))
            .map_or(default, |n| n.max(0) as usize)
    };
    limits.hash_entries = number("hash-max-listpack-entries", limits.hash_entries);
    limits.hash_value_bytes = number("hash-max-listpack-value", limits.hash_value_bytes);
    limits.zset_entries = number("zset-max-listpack-entries", limits.zset_entries);
    limits.zset_value_bytes = number("zset-max-listpack-value", limits.zset_value_bytes);
    limits.set_intset_entries = number("set-max-intset-entries", limits.set_intset_entries);
    limits
}

pub(super) fn command_command(args: &[Vec<u8>], out: &mut Out) -> Result<(), String> {
    let sub = args
        .get(1)
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    let describe = |out: &mut Out, spec: &Spec| {
        out.array(10);
        out.bulk(spec.name.as_bytes());
        out.int(i64::from(spec.arity));
        out.set(spec.flags.len());
        for flag in spec.flags {
            out.simple(flag);
        }
        out.int(i64::from(spec.first));
        out.int(i64::from(spec.last));
        out.int(i64::from(spec.step));
        out.set(1);
        out.simple(&format!("@{}", spec.category));
        out.set(0);
        out.array(0);
        out.array(0);
    };
    match sub.as_deref() {
        None => {
            out.array(table::COMMANDS.len());
            for spec in table::COMMANDS {
                describe(out, spec);
            }
        }
        Some("count") => out.int(table::COMMANDS.len() as i64),
        Some("list") => {
            let names: Vec<&str> = match args.len() {
                2 => table::COMMANDS.iter().map(|spec| spec.name).collect(),
                5 if args[2].eq_ignore_ascii_case(b"filterby") => {
                    let value = String::from_utf8_lossy(&args[4]).into_owned();
                    match String::from_utf8_lossy(&args[3])
                        .to_ascii_lowercase()
                        .as_str()
                    {
                        "module" => Vec::new(),
                        "aclcat" => table::COMMANDS
                            .iter()
                            .filter(|spec| spec.category.eq_ignore_ascii_case(&value))
                            .map(|spec| spec.name)
                            .collect(),
                        "pattern" => table::COMMANDS
                            .iter()
                            .filter(|spec| super::glob(value.as_bytes(), spec.name.as_bytes()))
                            .map(|spec| spec.name)
                            .collect(),
                        _ => return Err("ERR syntax error".to_owned()),
                    }
                }
                _ => return Err("ERR syntax error".to_owned()),
            };
            out.array(names.len());
            for name in names {
                out.bulk(name.as_bytes());
            }
        }
        Some("info") => {
            let names: Vec<String> = if args.len() > 2 {
                args[2..]
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                    .collect()
            } else {
                table::COMMANDS.iter().map(|s| s.name.to_owned()).collect()
            };
            out.array(names.len());
            for name in names {
                match table::find(&name) {
                    Some(spec) => describe(out, spec),
                    None => out.null_array(),
                }
            }
        }
        Some("docs") => {
            let specs: Vec<&Spec> = if args.len() > 2 {
                args[2..]
                    .iter()
                    .filter_map(|a| table::find(&String::from_utf8_lossy(a).to_ascii_lowercase()))
                    .collect()
            } else {
                table::COMMANDS.iter().collect()
            };
            out.map(specs.len());
            for spec in specs {
                out.bulk(spec.name.as_bytes());
                out.map(3);
                out.bulk(b"summary");
                out.bulk(
                    format!("the Redis {} command", spec.name.to_ascii_uppercase()).as_bytes(),
                );
                out.bulk(b"since");
                out.bulk(b"1.0.0");
                out.bulk(b"group");
                out.bulk(spec.category.as_bytes());
            }
        }
        Some("getkeys") => {
            let name = args
                .get(2)
                .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
                .unwrap_or_default();
            let Some(spec) = table::find(&name) else {
                return Err("ERR Invalid command specified".to_owned());
            };
            let keys = table::keys(spec, &args[2..]);
            if keys.is_empty() {
                return Err("ERR The command has no key arguments".to_owned());
            }
            out.array(keys.len());
            for key in keys {
                out.bulk(key);
            }
        }
        Some(other) => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                truncate(other)
            ))
        }
    }
    Ok(())
}
