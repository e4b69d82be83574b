use super::*;

struct Modules(HashMap<String, Arc<[u8]>>, u64);

impl Sources for Modules {
    fn generation(&self) -> u64 {
        self.1
    }
    fn source(&self, filename: &str) -> Option<Arc<[u8]>> {
        self.0.get(filename).cloned()
    }
}

fn sources(modules: &[(&str, &str)], generation: u64) -> Arc<dyn Sources> {
    Arc::new(Modules(
        modules
            .iter()
            .map(|(name, text)| (format!("{name}.lua"), Arc::from(text.as_bytes())))
            .collect(),
        generation,
    ))
}

fn record(bins: &[(&str, Value)]) -> RecordInfo {
    RecordInfo {
        exists: true,
        bins: bins
            .iter()
            .map(|(name, value)| (name.as_bytes().to_vec(), value.clone()))
            .collect(),
        generation: 3,
        ttl: 100,
        ..RecordInfo::default()
    }
}

const LIMIT: Duration = Duration::from_millis(300);

#[test]
fn record_udfs_read_write_create_and_remove() {
    let s = sources(
        &[(
            "m",
            r#"
            function add(rec, bin, n)
                rec[bin] = (rec[bin] or 0) + n
                aerospike:update(rec)
                return rec[bin]
            end
            function uncommitted(rec) rec.x = 1 return record.gen(rec) end
            function make(rec, v) rec.v = v return aerospike:create(rec) end
            function gone(rec) return aerospike:remove(rec) end
            function echo(rec, a) return a end
            function names(rec) return record.bin_names(rec) end
            function boom(rec) error("boom") end
            "#,
        )],
        1,
    );
    let (result, outcome) = apply_record(
        &s,
        "m",
        "add",
        &[Value::Str(b"a".to_vec()), Value::Int(5)],
        record(&[("a", Value::Int(2))]),
        LIMIT,
    );
    assert_eq!(result, Ok(Value::Int(7)));
    assert!(outcome.updated);
    assert_eq!(outcome.bins, vec![(b"a".to_vec(), Value::Int(7))]);

    let (result, outcome) = apply_record(&s, "m", "uncommitted", &[], record(&[]), LIMIT);
    assert_eq!(result, Ok(Value::Int(3)));
    assert!(
        !outcome.updated,
        "changes without aerospike:update are not written"
    );

    let missing = RecordInfo::default();
    let (result, outcome) = apply_record(&s, "m", "make", &[Value::Int(9)], missing.clone(), LIMIT);
    assert_eq!(result, Ok(Value::Int(0)));
    assert!(outcome.updated && outcome.exists);
    let (result, _) = apply_record(
        &s,
        "m",
        "make",
        &[Value::Int(9)],
        record(&[("v", Value::Int(1))]),
        LIMIT,
    );
    assert_eq!(
        result,
        Ok(Value::Int(1)),
        "create of an existing record answers 1"
    );

    let (result, outcome) =
        apply_record(&s, "m", "gone", &[], record(&[("v", Value::Int(1))]), LIMIT);
    assert_eq!(result, Ok(Value::Int(0)));
    assert!(outcome.updated && outcome.bins.is_empty());

    let nested = Value::Map(vec![
        (
            Value::Str(b"l".to_vec()),
            Value::List(vec![Value::Int(1), Value::Nil, Value::Bytes(4, vec![7])]),
        ),
        (Value::Int(2), Value::Float(0.5)),
    ]);
    let (result, _) = apply_record(
        &s,
        "m",
        "echo",
        std::slice::from_ref(&nested),
        missing.clone(),
        LIMIT,
    );
    assert_eq!(result, Ok(nested));
    let (result, _) = apply_record(
        &s,
        "m",
        "names",
        &[],
        record(&[("a", Value::Int(1)), ("b", Value::Int(2))]),
        LIMIT,
    );
    assert_eq!(
        result,
        Ok(Value::List(vec![
            Value::Str(b"a".to_vec()),
            Value::Str(b"b".to_vec())
        ]))
    );

    let (result, _) = apply_record(&s, "m", "boom", &[], missing.clone(), LIMIT);
    assert_eq!(result, Err(UdfError("m.lua:12: boom".to_owned())));
    let (result, _) = apply_record(&s, "m", "nope", &[], missing.clone(), LIMIT);
    assert_eq!(result, Err(UdfError("function not found".to_owned())));
    let (result, _) = apply_record(&s, "nomodule", "f", &[], missing, LIMIT);
    assert!(result.is_err());
}

#[test]
fn hostile_udfs_end_in_errors_within_their_limits() {
    let s = sources(
        &[(
            "h",
            r#"
            function spin(rec) while true do end end
            function spin_in_pcall(rec)
                while true do pcall(function() while true do end end) end
            end
            function hog(rec) local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1000000) .. i end end
            function big(rec) return string.rep("x", 1e10) end
            function files(rec) return io.open("/etc/passwd") end
            function shell(rec) return os.execute("true") end
            function bytecode(rec) return load(string.dump(function() end)) end
            function recurse(rec) return recurse(rec) + 1 end
            function self_list(rec) local l = list() list.append(l, l) return l end
            "#,
        )],
        1,
    );
    for (function, contains) in [
        ("spin", TIMEOUT_MESSAGE),
        ("spin_in_pcall", TIMEOUT_MESSAGE),
        ("hog", "memory"),
        ("big", ""),
        ("files", "nil"),
        ("shell", "nil"),
        ("recurse", "stack overflow"),
    ] {
        let started = Instant::now();
        let (result, _) = apply_record(&s, "h", function, &[], RecordInfo::default(), LIMIT);
        let Err(UdfError(message)) = result else {
            panic!("{function} should fail");
        };
        assert!(message.contains(contains), "{function}: {message}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{function} ran {:?}",
            started.elapsed()
        );
    }
    let (result, _) = apply_record(&s, "h", "bytecode", &[], RecordInfo::default(), LIMIT);
    assert_eq!(
        result,
        Ok(Value::Nil),
        "binary chunks are refused (load returns nil)"
    );
    let (result, _) = apply_record(&s, "h", "self_list", &[], RecordInfo::default(), LIMIT);
    assert!(matches!(result, Ok(Value::List(_))));
}

#[test]
fn streams_filter_map_aggregate_and_reduce() {
    let s = sources(
        &[(
            "agg",
            r#"
            local function add(a, b) return a + b end
            function sum(s, bin) return s:map(function(r) return r[bin] end):reduce(add) end
            function evens(s) return s:filter(function(r) return r.n % 2 == 0 end):map(function(r) return r.n end) end
            function count(s)
                return s:aggregate(map{c = 0}, function(m, r) m.c = m.c + 1 return m end)
                        :reduce(function(a, b) a.c = a.c + b.c return a end)
            end
            function groups(s) return s:groupby(function(r) return r.n % 3 end) end
            "#,
        )],
        1,
    );
    let records = || {
        (1..=10)
            .map(|n| record(&[("n", Value::Int(n))]))
            .collect::<Vec<_>>()
    };
    let run = |function: &str, args: &[Value]| {
        let mut out = Vec::new();
        apply_stream(
            &s,
            "agg",
            function,
            args,
            &mut records().into_iter(),
            &mut |v| out.push(v),
            LIMIT,
        )
        .map(|()| out)
    };
    assert_eq!(
        run("sum", &[Value::Str(b"n".to_vec())]),
        Ok(vec![Value::Int(55)])
    );
    assert_eq!(
        run("evens", &[]),
        Ok((1..=5).map(|n| Value::Int(2 * n)).collect::<Vec<_>>())
    );
    assert_eq!(
        run("count", &[]),
        Ok(vec![Value::Map(vec![(
            Value::Str(b"c".to_vec()),
            Value::Int(10)
        )])])
    );
    let Ok(grouped) = run("groups", &[]) else {
        panic!("groupby");
    };
    let [Value::Map(groups)] = grouped.as_slice() else {
        panic!("one map: {grouped:?}");
    };
    assert_eq!(groups.len(), 3);
    assert!(run("missing", &[]).is_err());
}

#[test]
fn sources_are_checked_and_modules_reload_on_a_new_generation() {
    assert_eq!(check_source("ok.lua", b"function f() return 1 end"), Ok(()));
    let error = check_source("bad.lua", b"function f(\n  return 1 end").expect_err("syntax error");
    assert_eq!(error.line, 2);
    let first = sources(&[("v", "function f() return 1 end")], 1);
    let second = sources(&[("v", "function f() return 2 end")], 2);
    assert_eq!(
        apply_record(&first, "v", "f", &[], RecordInfo::default(), LIMIT).0,
        Ok(Value::Int(1))
    );
    assert_eq!(
        apply_record(&second, "v", "f", &[], RecordInfo::default(), LIMIT).0,
        Ok(Value::Int(2))
    );
    let with_require = sources(
        &[
            (
                "lib",
                "local M = {} function M.twice(x) return 2 * x end return M",
            ),
            (
                "user",
                "local lib = require('lib') function f(rec, x) return lib.twice(x) end",
            ),
        ],
        3,
    );
    assert_eq!(
        apply_record(
            &with_require,
            "user",
            "f",
            &[Value::Int(4)],
            RecordInfo::default(),
            LIMIT
        )
        .0,
        Ok(Value::Int(8))
    );
}
