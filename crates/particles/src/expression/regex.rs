//! `CmpRegex`: POSIX regular expressions as `regcomp` reads them, run by
//! the `regex` crate.

use bolide_types::ResultCode;

/// A POSIX regular expression (as `regcomp` takes it), compiled once per
/// request.
#[derive(Clone, Debug)]
pub struct PosixRegex(regex::bytes::Regex);

impl PartialEq for PosixRegex {
    fn eq(&self, other: &PosixRegex) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// `regcomp` flags as the clients send them (glibc's values).
pub(super) mod regex_flag {
    pub const EXTENDED: i64 = 1;
    pub const ICASE: i64 = 2;
    pub const NEWLINE: i64 = 8;
}

/// Compiled patterns larger than this are refused (a request must not make
/// the server build an unbounded automaton).
const REGEX_SIZE_MAX: usize = 1 << 20;

impl PosixRegex {
    /// Compiles a POSIX basic (or, with REG_EXTENDED, extended) regular
    /// expression with `regcomp`'s flags: REG_ICASE ignores case;
    /// REG_NEWLINE makes `.` and bracket lists stop at newlines and `^`/`$`
    /// match at them. A pattern that does not compile is PARAMETER.
    pub fn compile(pattern: &[u8], flags: i64) -> Result<PosixRegex, ResultCode> {
        let pattern = std::str::from_utf8(pattern).map_err(|_| ResultCode::Parameter)?;
        let translated = translate_posix(pattern, flags & regex_flag::EXTENDED != 0);
        let newline = flags & regex_flag::NEWLINE != 0;
        regex::bytes::RegexBuilder::new(&translated)
            .case_insensitive(flags & regex_flag::ICASE != 0)
            .multi_line(newline)
            .dot_matches_new_line(!newline)
            .unicode(false)
            .size_limit(REGEX_SIZE_MAX)
            .build()
            .map(PosixRegex)
            .map_err(|_| ResultCode::Parameter)
    }

    pub fn is_match(&self, subject: &[u8]) -> bool {
        self.0.is_match(subject)
    }
}

/// Rewrites a POSIX pattern in the syntax of the `regex` crate. In a basic
/// expression `\(`, `\)`, `\{`, `\}`, `\|`, `\+` and `\?` are the operators
/// and the bare characters are literals (the reverse of extended syntax);
/// inside a bracket list a backslash is an ordinary character.
pub(super) fn translate_posix(pattern: &str, extended: bool) -> String {
    const SWAPPED: &[char] = &['(', ')', '{', '}', '|', '+', '?'];
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    // Where a `*` has nothing to repeat (the start, after a leading `^` or
    // a group's opening) basic syntax reads it as a literal.
    let mut star_is_literal = !extended;
    while let Some(c) = chars.next() {
        let at_group_start = std::mem::replace(&mut star_is_literal, false);
        match c {
            '*' if at_group_start => out.push_str("\\*"),
            '^' if at_group_start => {
                out.push('^');
                star_is_literal = true;
            }
            // Elsewhere basic syntax reads `^` as a literal, and `$` too
            // unless it ends the pattern or a group.
            '^' if !extended => out.push_str("\\^"),
            '$' if !extended
                && chars.peek().is_some()
                && !chars.clone().take(2).eq(['\\', ')']) =>
            {
                out.push_str("\\$")
            }
            '[' => {
                // Copy the bracket list; `]` first (or after `^`) is literal.
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                if chars.peek() == Some(&']') {
                    chars.next();
                    out.push_str("\\]");
                }
                while let Some(inner) = chars.next() {
                    match inner {
                        ']' => {
                            out.push(']');
                            break;
                        }
                        '\\' => out.push_str("\\\\"),
                        '[' if matches!(chars.peek(), Some(':' | '.' | '=')) => {
                            // A class like [:alpha:]: copy through its `]`.
                            out.push('[');
                            for class in chars.by_ref() {
                                out.push(class);
                                if class == ']' {
                                    break;
                                }
                            }
                        }
                        '[' => out.push_str("\\["),
                        other => out.push(other),
                    }
                }
            }
            '\\' if !extended && chars.peek().is_some_and(|next| SWAPPED.contains(next)) => {
                if let Some(next) = chars.next() {
                    out.push(next);
                    star_is_literal = next == '(';
                }
            }
            '\\' => {
                out.push('\\');
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            c if !extended && SWAPPED.contains(&c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}
