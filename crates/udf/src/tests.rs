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

/// The `bytes` module answers as the server's mod-lua does (its C source:
/// `bytes(n)` reserves n bytes and holds none, writes past the size grow
/// it, values out of a width's range are refused, `set_size` only checks
/// the capacity, the var-int writers leave the size alone).
#[test]
fn bytes_behave_as_the_servers() {
    let int = Value::Int;
    let t = Value::Bool(true);
    let f = Value::Bool(false);
    let s = |text: &str| Value::Str(text.as_bytes().to_vec());
    let cases: Vec<(&str, Vec<Value>)> = vec![
        (
            "local b = bytes(18) return list{bytes.size(b), #b, b[1] == nil, tostring(b)}",
            vec![int(0), int(0), t.clone(), s("Bytes()")],
        ),
        (
            "local b = bytes(18) b[1] = 5 return list{b[1], bytes.size(b)}",
            vec![int(5), int(1)],
        ),
        (
            "local b = bytes() local ok = bytes.set_byte(b, 3, 7) return list{ok, bytes.size(b), b[1], b[2], b[3]}",
            vec![t.clone(), int(3), int(0), int(0), int(7)],
        ),
        (
            "local b = bytes(18) bytes.set_int16(b, 1, 0x5555) bytes.set_int32(b, 3, 0x66778899) \
             return list{tostring(b), bytes.get_int16(b, 1), bytes.get_int32_le(b, 3), bytes.get_int16(b, 6) == nil}",
            vec![s("55 55 66 77 88 99"), int(0x5555), int(-1719109786), t.clone()],
        ),
        (
            "local b = bytes() return list{bytes.set_int16(b, 1, 40000), bytes.set_int16_le(b, 1, -32768), \
             bytes.set_int32(b, 3, 2147483648), bytes.set_byte(b, 1, 256), bytes.set_byte(b, 0, 1), \
             bytes.append_byte(b, -1), bytes.append_int16(b, 32768), bytes.size(b), b[1], b[2]}",
            vec![f.clone(), t.clone(), f.clone(), f.clone(), f.clone(), f.clone(), f.clone(), int(2), int(0), int(0x80)],
        ),
        (
            "local b = bytes() local o = bytes() bytes.append_string(o, 'xyz') \
             return list{bytes.append_string(b, ''), bytes.append_string(b, 'ab'), bytes.append_bytes(b, o), \
             bytes.append_bytes(b, o, 10), bytes.append_int16_le(b, 258), bytes.size(b), bytes.get_string(b, 2, 4), \
             bytes.get_string(b, 6, 3) == nil, bytes.get_byte(b, 6), bytes.get_byte(b, 7)}",
            vec![f.clone(), t.clone(), f.clone(), t.clone(), t.clone(), int(7), s("bxyz"), t.clone(), int(2), int(1)],
        ),
        (
            "local b = bytes(4) return list{bytes.set_size(b, 4), bytes.set_size(b, 5), bytes.set_size(b, -1), bytes.size(b)}",
            vec![t.clone(), f.clone(), f.clone(), int(0)],
        ),
        (
            // append_var_int writes past the size without growing it; a
            // later write reaching past it brings its first byte in.
            "local b = bytes() bytes.append_byte(b, 1) local n = bytes.append_var_int(b, 300) local before = bytes.size(b) \
             bytes.set_byte(b, 3, 9) local v, read = bytes.get_var_int(b, 2) \
             return list{n, before, bytes.size(b), b[2], v, read}",
            vec![int(2), int(1), int(3), int(0xac), int(1196), int(2)],
        ),
        (
            "local b = bytes() bytes.set_string(b, 1, 'xyz') local n = bytes.set_var_int(b, 1, 300) local v, read = bytes.get_var_int(b, 1) \
             return list{n, bytes.size(b), v, read, bytes.set_var_int(b, 1, 2147483648), bytes.get_var_int(b, 3) == 122}",
            vec![int(2), int(3), int(300), int(2), int(0), t.clone()],
        ),
        (
            "local b = bytes() bytes.append_string(b, 'hello') local c = bytes.get_bytes(b, 2, 3) \
             return list{bytes.size(c), tostring(c), bytes.get_bytes(b, 4, 3) == nil, bytes.get_type(c), \
             bytes.set_type(c, 0), bytes.set_type(c, 7), bytes.get_type(c)}",
            vec![int(3), s("65 6C 6C"), t.clone(), int(4), f.clone(), t.clone(), int(7)],
        ),
        (
            "local b = bytes() b[1] = 300 b[0] = 1 local a, c = bytes(), bytes() \
             return list{bytes.size(b), a == c, a == a}",
            vec![int(0), f.clone(), t.clone()],
        ),
        (
            "local b = bytes() bytes.set_bytes(b, 2, b, 5) local o = bytes() bytes.append_string(o, 'abc') \
             return list{bytes.size(b), bytes.set_bytes(b, 2, o, 2), bytes.size(b), bytes.get_string(b, 2, 2), \
             bytes.set_bytes(b, 0, o, 2)}",
            vec![int(1), t.clone(), int(3), s("ab"), f.clone()],
        ),
    ];
    let mut module = String::new();
    for (i, (body, _)) in cases.iter().enumerate() {
        module.push_str(&format!("function c{i}(rec) {body} end\n"));
    }
    let s = sources(&[("b", &module)], 1);
    for (i, (body, expected)) in cases.iter().enumerate() {
        let (result, _) =
            apply_record(&s, "b", &format!("c{i}"), &[], RecordInfo::default(), LIMIT);
        assert_eq!(result, Ok(Value::List(expected.clone())), "{body}");
    }
}

/// A bin set to a `bytes` value stores its size's worth, not its capacity;
/// the buffers count against a budget of their own (they are outside the
/// Lua state's memory limit), and unreachable ones are collected to make
/// room.
#[test]
fn bytes_values_are_stored_by_size_and_kept_within_a_budget() {
    let s = sources(
        &[(
            "b",
            r#"
            function store(rec)
                local b = bytes(100)
                bytes.append_string(b, 'ab')
                rec['blob'] = b
                aerospike:update(rec)
                return bytes.size(rec['blob'])
            end
            function hoard(rec)
                local t = {}
                for i = 1, 200 do
                    local b = bytes()
                    bytes.set_byte(b, 1000000, 1)
                    t[i] = b
                end
                return #t
            end
            function churn(rec)
                for i = 1, 300 do
                    local b = bytes()
                    bytes.set_byte(b, 1000000, 1)
                end
                return 'done'
            end
            function huge(rec) return bytes(20 * 1024 * 1024) end
            "#,
        )],
        1,
    );
    let (result, outcome) = apply_record(&s, "b", "store", &[], record(&[]), LIMIT);
    assert_eq!(result, Ok(Value::Int(2)));
    assert_eq!(
        outcome.bins,
        vec![(b"blob".to_vec(), Value::Bytes(4, b"ab".to_vec()))]
    );
    let long = Duration::from_secs(5);
    let (result, _) = apply_record(&s, "b", "hoard", &[], RecordInfo::default(), long);
    let Err(UdfError(message)) = result else {
        panic!("200 MB of bytes should be refused: {result:?}");
    };
    assert!(message.contains("memory"), "{message}");
    let (result, _) = apply_record(&s, "b", "churn", &[], RecordInfo::default(), long);
    assert_eq!(result, Ok(Value::Str(b"done".to_vec())));
    let (result, _) = apply_record(&s, "b", "huge", &[], RecordInfo::default(), LIMIT);
    assert!(
        matches!(result, Err(UdfError(ref m)) if m.contains("too large")),
        "{result:?}"
    );
    assert!(crate::bytes::held() <= crate::bytes::BYTES_BUDGET);
}

/// `tostring` of lists and maps, `list.tostring`, `map.tostring` and the
/// `nbytes` functions answer as the server's as_val_tostring and msgpack
/// serializer do.
#[test]
fn list_and_map_text_and_sizes_are_the_servers() {
    let s = sources(
        &[(
            "t",
            r#"
            function text(rec)
                local l = list{1, 'ab', 2.5, true, list{3}, map{x = 1}, bytes()}
                return list{tostring(l), list.tostring(list()), map.tostring(map{k = 'v'}), tostring(map())}
            end
            function sizes(rec)
                return list{list.nbytes(list{1, 'ab', 2.5}), map.nbytes(map{a = 1}), list.nbytes(list())}
            end
            "#,
        )],
        1,
    );
    let s_ = |text: &str| Value::Str(text.as_bytes().to_vec());
    let (result, _) = apply_record(&s, "t", "text", &[], RecordInfo::default(), LIMIT);
    assert_eq!(
        result,
        Ok(Value::List(vec![
            s_(r#"[1, "ab", 2.5, true, [3], {"x":1}, <NULL>]"#),
            s_("[]"),
            s_(r#"{"k":"v"}"#),
            s_("{}"),
        ]))
    );
    let (result, _) = apply_record(&s, "t", "sizes", &[], RecordInfo::default(), LIMIT);
    // [1, "ab", 2.5]: array header, 1, a string with its type byte (4), a
    // float64 (9); {a: 1}: map header, "a" with its type byte (3), 1.
    assert_eq!(
        result,
        Ok(Value::List(vec![
            Value::Int(15),
            Value::Int(5),
            Value::Int(1)
        ]))
    );
}
