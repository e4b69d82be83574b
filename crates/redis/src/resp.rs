//! RESP framing, with no I/O: requests (arrays of bulk strings, or inline
//! lines) are parsed off the front of a buffer, and replies are encoded
//! for the connection's protocol version (RESP2, or RESP3 after `HELLO 3`),
//! degrading RESP3-only types for RESP2 clients as Redis does.

/// Largest bulk string a request may carry (Redis's `proto-max-bulk-len`).
pub const BULK_BYTES_MAX: usize = 512 << 20;
/// Most elements one request array may have.
pub const ARGS_MAX: usize = 1 << 20;
/// Longest inline request line.
pub const INLINE_BYTES_MAX: usize = 64 << 10;

/// A request that cannot be parsed: the error is sent, then the
/// connection is closed (as Redis does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub std::borrow::Cow<'static, str>);

impl ProtocolError {
    fn new(text: &'static str) -> ProtocolError {
        ProtocolError(std::borrow::Cow::Borrowed(text))
    }

    pub fn text(&self) -> String {
        format!("Protocol error: {}", self.0)
    }
}

/// A parsed request: its arguments, and the bytes it took.
pub type Request = (Vec<Vec<u8>>, usize);

/// Parses one request off the front of `input`: its arguments and the
/// bytes it took; `Ok(None)` when the request is not complete yet. An
/// empty request (`*0`, `*-1`, a blank line) gives no arguments.
pub fn parse(input: &[u8]) -> Result<Option<Request>, ProtocolError> {
    let Some(&first) = input.first() else {
        return Ok(None);
    };
    if first != b'*' {
        return parse_inline(input);
    }
    let Some((count, mut at)) = line_number(input, 1, "invalid multibulk length")? else {
        return Ok(None);
    };
    if count > ARGS_MAX as i64 {
        return Err(ProtocolError::new("invalid multibulk length"));
    }
    if count <= 0 {
        return Ok(Some((Vec::new(), at)));
    }
    let count = count as usize;
    let mut args = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let Some(&marker) = input.get(at) else {
            return Ok(None);
        };
        if marker != b'$' {
            return Err(ProtocolError(
                format!("expected '$', got '{}'", char::from(marker)).into(),
            ));
        }
        let Some((length, data)) = line_number(input, at + 1, "invalid bulk length")? else {
            return Ok(None);
        };
        if length < 0 || length as usize > BULK_BYTES_MAX {
            return Err(ProtocolError::new("invalid bulk length"));
        }
        let end = data + length as usize;
        if input.len() < end + 2 {
            return Ok(None);
        }
        if &input[end..end + 2] != b"\r\n" {
            return Err(ProtocolError::new("invalid bulk length"));
        }
        args.push(input[data..end].to_vec());
        at = end + 2;
    }
    Ok(Some((args, at)))
}

/// A decimal number from `at` up to CRLF: the number and where the next
/// line starts.
fn line_number(
    input: &[u8],
    at: usize,
    invalid: &'static str,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    let rest = input.get(at..).unwrap_or_default();
    let Some(end) = rest.iter().position(|&b| b == b'\r') else {
        if rest.len() > 32 {
            return Err(ProtocolError::new(invalid));
        }
        return Ok(None);
    };
    if rest.len() < end + 2 {
        return Ok(None);
    }
    if rest[end + 1] != b'\n' {
        return Err(ProtocolError::new(invalid));
    }
    let number = std::str::from_utf8(&rest[..end])
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or(ProtocolError::new(invalid))?;
    Ok(Some((number, at + end + 2)))
}

fn parse_inline(input: &[u8]) -> Result<Option<Request>, ProtocolError> {
    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
        if input.len() > INLINE_BYTES_MAX {
            return Err(ProtocolError::new("too big inline request"));
        }
        return Ok(None);
    };
    let mut line = &input[..newline];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    let args = split_args(line).ok_or(ProtocolError::new("unbalanced quotes in request"))?;
    Ok(Some((args, newline + 1)))
}

/// Splits an inline line as Redis does: spaces separate, `"…"` takes
/// escapes (`\n \r \t \b \a \\ \" \xHH`), `'…'` takes `\'`; a closing
/// quote must end the argument. None: unbalanced quotes. A zero byte ends
/// the line, as it ends the C string Redis splits (inside quotes it leaves
/// them unbalanced).
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // (A quote still open at the cut leaves it unbalanced below.)
    let line = match line.iter().position(|&byte| byte == 0) {
        Some(end) => &line[..end],
        None => line,
    };
    let mut args = Vec::new();
    let mut at = 0;
    loop {
        while at < line.len() && line[at].is_ascii_whitespace() {
            at += 1;
        }
        if at >= line.len() {
            return Some(args);
        }
        let mut arg = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let Some(&byte) = line.get(at) else {
                if in_double || in_single {
                    return None;
                }
                break;
            };
            if in_double {
                if byte == b'\\' && at + 3 < line.len() && line[at + 1] == b'x' {
                    let hex = |b: u8| (b as char).to_digit(16);
                    if let (Some(high), Some(low)) = (hex(line[at + 2]), hex(line[at + 3])) {
                        arg.push((high * 16 + low) as u8);
                        at += 4;
                        continue;
                    }
                }
                if byte == b'\\' && at + 1 < line.len() {
                    at += 1;
                    arg.push(match line[at] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if byte == b'"' {
                    if line.get(at + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return None;
                    }
                    at += 1;
                    break;
                } else {
                    arg.push(byte);
                }
            } else if in_single {
                if byte == b'\\' && line.get(at + 1) == Some(&b'\'') {
                    at += 1;
                    arg.push(b'\'');
                } else if byte == b'\'' {
                    if line.get(at + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return None;
                    }
                    at += 1;
                    break;
                } else {
                    arg.push(byte);
                }
            } else {
                match byte {
                    b' ' | b'\n' | b'\r' | b'\t' => break,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => arg.push(byte),
                }
            }
            at += 1;
        }
        args.push(arg);
    }
}

/// Encodes replies into a connection's output buffer.
pub struct Out {
    pub buf: Vec<u8>,
    /// RESP3 (after `HELLO 3`).
    pub resp3: bool,
}

impl Out {
    pub fn new(resp3: bool) -> Out {
        Out {
            buf: Vec::with_capacity(16 * 1024),
            resp3,
        }
    }

    fn line(&mut self, prefix: u8, text: &[u8]) {
        self.buf.push(prefix);
        self.buf.extend_from_slice(text);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn number(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        let mut tmp = itoa_buf(n);
        self.buf.append(&mut tmp);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    pub fn simple(&mut self, text: &str) {
        self.line(b'+', text.as_bytes());
    }

    /// An error reply; `text` starts with its code (`ERR …`, `WRONGTYPE …`).
    /// Line breaks are replaced by spaces, as Redis does.
    pub fn error(&mut self, text: &str) {
        let clean: Vec<u8> = text
            .bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        self.line(b'-', &clean);
    }

    pub fn int(&mut self, n: i64) {
        self.number(b':', n);
    }

    pub fn bulk(&mut self, bytes: &[u8]) {
        self.number(b'$', bytes.len() as i64);
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A missing value: `$-1` (RESP2) or `_` (RESP3).
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// A missing array: `*-1` (RESP2) or `_` (RESP3).
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array(&mut self, n: usize) {
        self.number(b'*', n as i64);
    }

    /// A map of `pairs` pairs: `%` (RESP3) or a flat array (RESP2).
    pub fn map(&mut self, pairs: usize) {
        if self.resp3 {
            self.number(b'%', pairs as i64);
        } else {
            self.number(b'*', 2 * pairs as i64);
        }
    }

    /// A set: `~` (RESP3) or an array (RESP2).
    pub fn set(&mut self, n: usize) {
        if self.resp3 {
            self.number(b'~', n as i64);
        } else {
            self.number(b'*', n as i64);
        }
    }

    /// A double: `,` (RESP3) or a bulk string (RESP2), printed as Redis
    /// 7.0 prints scores (`%.17g`).
    pub fn double(&mut self, value: f64) {
        let text = format_score(value);
        if self.resp3 {
            self.line(b',', text.as_bytes());
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// A RESP3 double already printed (`,text`).
    pub fn raw_double(&mut self, text: &str) {
        self.line(b',', text.as_bytes());
    }

    /// Text for humans: verbatim `txt` (RESP3) or a bulk string (RESP2).
    pub fn verbatim(&mut self, text: &[u8]) {
        if self.resp3 {
            self.number(b'=', text.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// Text in a given three-letter format: verbatim (RESP3) or a bulk
    /// string (RESP2).
    pub fn verbatim_as(&mut self, format: &[u8], text: &[u8]) {
        if self.resp3 {
            self.number(b'=', text.len() as i64 + 4);
            let mut kind = [b' '; 3];
            for (slot, byte) in kind.iter_mut().zip(format) {
                *slot = *byte;
            }
            self.buf.extend_from_slice(&kind);
            self.buf.push(b':');
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// A big number: `(` (RESP3) or a bulk string (RESP2).
    pub fn big_number(&mut self, digits: &[u8]) {
        if self.resp3 {
            self.line(b'(', digits);
        } else {
            self.bulk(digits);
        }
    }

    /// A push frame header (RESP3) or an array (RESP2).
    pub fn push(&mut self, n: usize) {
        if self.resp3 {
            self.number(b'>', n as i64);
        } else {
            self.array(n);
        }
    }

    pub fn bool(&mut self, value: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if value { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(i64::from(value));
        }
    }
}

fn itoa_buf(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// A double as Redis 7.0 prints scores: `%.17g`, `inf`/`-inf`.
pub fn format_score(value: f64) -> String {
    format_g(value, 17)
}

/// `%.<precision>g` as C prints it.
pub fn format_g(value: f64, precision: usize) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let precision = precision.max(1);
    let scientific = format!("{:.*e}", precision - 1, value);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if exponent < -4 || exponent >= precision as i32 {
        let mantissa = trim_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let decimals = (precision as i32 - 1 - exponent).max(0) as usize;
        trim_zeros(&format!("{value:.decimals$}")).to_owned()
    }
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arrays_inline_and_partial_requests() {
        let input = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let (args, used) = parse(input).expect("valid").expect("complete");
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(used, input.len());
        for cut in 0..input.len() {
            assert_eq!(
                parse(&input[..cut]).expect("valid prefix"),
                None,
                "cut {cut}"
            );
        }
        let (args, used) = parse(b"set a \"hello world\"\r\nPING\r\n")
            .expect("valid")
            .expect("complete");
        assert_eq!(
            args,
            vec![b"set".to_vec(), b"a".to_vec(), b"hello world".to_vec()]
        );
        assert_eq!(used, 21);
        assert_eq!(parse(b"\r\n").expect("ok"), Some((vec![], 2)));
        assert_eq!(parse(b"*0\r\n").expect("ok"), Some((vec![], 4)));
        assert_eq!(parse(b"*-1\r\n").expect("ok"), Some((vec![], 5)));
    }

    #[test]
    fn refuses_malformed_requests_with_redis_errors() {
        assert_eq!(
            parse(b"*x\r\n").expect_err("refused").text(),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            parse(b"*1\r\n:3\r\n").expect_err("refused").text(),
            "Protocol error: expected '$', got ':'"
        );
        assert_eq!(
            parse(b"*1\r\n$-5\r\n").expect_err("refused").text(),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            parse(b"*1\r\n$999999999999\r\n")
                .expect_err("refused")
                .text(),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            parse(b"set a \"b\r\n").expect_err("refused").text(),
            "Protocol error: unbalanced quotes in request"
        );
        let long = vec![b'a'; INLINE_BYTES_MAX + 1];
        assert_eq!(
            parse(&long).expect_err("refused").text(),
            "Protocol error: too big inline request"
        );
        // A huge declared array is refused before anything is allocated.
        assert!(parse(b"*9999999999\r\n").is_err());
    }

    #[test]
    fn a_zero_byte_ends_an_inline_line() {
        // It once ended an argument without moving on: the splitter
        // pushed empty arguments forever (a TLS ClientHello on the plain
        // port held its event loop and grew its memory).
        assert_eq!(split_args(b"\0"), Some(Vec::new()));
        assert_eq!(split_args(b"\0\x01\x02 abc"), Some(Vec::new()));
        assert_eq!(
            split_args(b"get k\0ignored"),
            Some(vec![b"get".to_vec(), b"k".to_vec()])
        );
        assert_eq!(split_args(b"set \"a\0b\""), None);
        let hello = [22u8, 3, 1, 2, 0, 1, 0, 1, 0xfc, 3, 3, 0, 10, 13];
        assert_eq!(parse(&hello).map(|r| r.map(|(_, used)| used)), Ok(Some(13)));
    }

    #[test]
    fn inline_quoting_follows_redis() {
        assert_eq!(
            split_args(b"a \"x\\ny\\x41\" 'it\\'s'").expect("balanced"),
            vec![b"a".to_vec(), b"x\nyA".to_vec(), b"it's".to_vec()]
        );
        assert_eq!(split_args(b"\"a\"b"), None);
        assert_eq!(split_args(b"'a"), None);
    }

    #[test]
    fn replies_degrade_for_resp2() {
        let mut two = Out::new(false);
        let mut three = Out::new(true);
        for out in [&mut two, &mut three] {
            out.null();
            out.map(1);
            out.double(1.5);
            out.set(0);
        }
        assert_eq!(two.buf, b"$-1\r\n*2\r\n$3\r\n1.5\r\n*0\r\n");
        assert_eq!(three.buf, b"_\r\n%1\r\n,1.5\r\n~0\r\n");
    }

    #[test]
    fn scores_print_as_redis_7_0() {
        assert_eq!(format_score(0.1), "0.10000000000000001");
        assert_eq!(format_score(1.5), "1.5");
        assert_eq!(format_score(2.0), "2");
        assert_eq!(format_score(f64::INFINITY), "inf");
        assert_eq!(format_score(-f64::INFINITY), "-inf");
        assert_eq!(format_score(1e20), "1e+20");
        assert_eq!(format_score(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_g(10.5 + 0.1, 15), "10.6");
    }
}
