//! The aql-style statements `bolide sql` understands, and their parser.
//! A statement that does not parse is an error pointing at the word.
//!
//! ```text
//! INSERT INTO ns.set (PK, bin, …) VALUES (value, value, …)
//! SELECT * | bin, … FROM ns[.set] [WHERE PK = v | WHERE bin = v | WHERE bin BETWEEN a AND b] [LIMIT n]
//! DELETE FROM ns.set WHERE PK = v
//! SHOW NAMESPACES | SETS | BINS | INDEXES | UDFS
//! TRUNCATE ns[.set]
//! CREATE INDEX name ON ns[.set] (bin) NUMERIC | STRING
//! DROP INDEX ns[.set] name
//! EXPLAIN SELECT …
//! SET OUTPUT TABLE | JSON        HELP        QUIT | EXIT
//! value: 42, -1.5, 'text', "text", true, false, JSON('[1, {"a": 2}]'), LIST('[…]'), MAP('{…}')
//! ```

use std::fmt;

/// A literal value in a statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Json(serde_json::Value),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Predicate {
    Pk(Literal),
    Equals(String, Literal),
    Between(String, Literal, Literal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowWhat {
    Namespaces,
    Sets,
    Bins,
    Indexes,
    Udfs,
}

/// What a secondary index holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    Numeric,
    String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Insert {
        namespace: String,
        set: String,
        pk: Literal,
        bins: Vec<(String, Literal)>,
    },
    Select {
        bins: Option<Vec<String>>,
        namespace: String,
        set: Option<String>,
        predicate: Option<Predicate>,
        limit: Option<u64>,
    },
    Delete {
        namespace: String,
        set: String,
        pk: Literal,
    },
    Show(ShowWhat),
    Truncate {
        namespace: String,
        set: Option<String>,
    },
    CreateIndex {
        name: String,
        namespace: String,
        set: Option<String>,
        bin: String,
        kind: IndexKind,
    },
    DropIndex {
        namespace: String,
        set: Option<String>,
        name: String,
    },
    Explain(Box<Statement>),
    SetOutput(Format),
    Help,
    Quit,
}

/// A statement that does not parse: what was expected, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset and length of the offending word in the statement.
    pub position: usize,
    pub length: usize,
    pub message: String,
}

impl ParseError {
    /// The message, the statement and a caret line under the word.
    pub fn render(&self, statement: &str) -> String {
        let line_start = statement
            .get(..self.position)
            .and_then(|head| head.rfind('\n'))
            .map_or(0, |at| at + 1);
        let line_end = statement
            .get(self.position..)
            .and_then(|tail| tail.find('\n'))
            .map_or(statement.len(), |at| self.position + at);
        let line = statement.get(line_start..line_end).unwrap_or(statement);
        let column = statement
            .get(line_start..self.position)
            .map_or(0, |prefix| prefix.chars().count());
        format!(
            "error: {}\n  {line}\n  {}{}",
            self.message,
            " ".repeat(column),
            "^".repeat(self.length.max(1))
        )
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.position)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Word(String),
    Number(String),
    Str(String),
    Punct(char),
    End,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    position: usize,
    length: usize,
}

impl Token {
    fn describe(&self) -> String {
        match &self.kind {
            Kind::Word(word) => format!("'{word}'"),
            Kind::Number(number) => format!("'{number}'"),
            Kind::Str(text) => format!("string '{text}'"),
            Kind::Punct(c) => format!("'{c}'"),
            Kind::End => "the end of the statement".to_owned(),
        }
    }
}

fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let mut tokens = Vec::new();
    let bytes: Vec<(usize, char)> = text.char_indices().collect();
    let mut index = 0;
    while let Some(&(position, c)) = bytes.get(index) {
        if c.is_whitespace() {
            index += 1;
            continue;
        }
        let next = bytes.get(index + 1).map(|&(_, c)| c);
        if c == '\'' || c == '"' {
            let quote = c;
            let mut value = String::new();
            index += 1;
            loop {
                match bytes.get(index) {
                    None => {
                        return Err(ParseError {
                            position,
                            length: text.len() - position,
                            message: "unterminated string".to_owned(),
                        })
                    }
                    Some(&(_, ch)) if ch == quote => {
                        // A doubled quote stands for one.
                        if bytes.get(index + 1).map(|&(_, c)| c) == Some(quote) {
                            value.push(quote);
                            index += 2;
                            continue;
                        }
                        index += 1;
                        break;
                    }
                    Some(&(_, '\\')) if bytes.get(index + 1).is_some() => {
                        if let Some(&(_, escaped)) = bytes.get(index + 1) {
                            value.push(escaped);
                        }
                        index += 2;
                    }
                    Some(&(_, ch)) => {
                        value.push(ch);
                        index += 1;
                    }
                }
            }
            let end = bytes.get(index).map_or(text.len(), |&(at, _)| at);
            tokens.push(Token {
                kind: Kind::Str(value),
                position,
                length: end - position,
            });
            continue;
        }
        let starts_number = c.is_ascii_digit()
            || (c == '-' && next.is_some_and(|n| n.is_ascii_digit() || n == '.'));
        if starts_number {
            let start = index;
            index += 1;
            while let Some(&(_, ch)) = bytes.get(index) {
                if ch.is_ascii_alphanumeric() || ch == '.' || ch == '_' {
                    index += 1;
                } else {
                    break;
                }
            }
            let end = bytes.get(index).map_or(text.len(), |&(at, _)| at);
            let start_at = bytes.get(start).map_or(0, |&(at, _)| at);
            tokens.push(Token {
                kind: Kind::Number(text.get(start_at..end).unwrap_or("").to_owned()),
                position,
                length: end - position,
            });
            continue;
        }
        if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = position;
            index += 1;
            while let Some(&(_, ch)) = bytes.get(index) {
                if ch.is_alphanumeric() || ch == '_' || ch == '-' || ch == '$' {
                    index += 1;
                } else {
                    break;
                }
            }
            let end = bytes.get(index).map_or(text.len(), |&(at, _)| at);
            tokens.push(Token {
                kind: Kind::Word(text.get(start..end).unwrap_or("").to_owned()),
                position,
                length: end - position,
            });
            continue;
        }
        if "(),=*.;".contains(c) {
            tokens.push(Token {
                kind: Kind::Punct(c),
                position,
                length: 1,
            });
            index += 1;
            continue;
        }
        return Err(ParseError {
            position,
            length: c.len_utf8(),
            message: format!("unexpected character '{c}'"),
        });
    }
    tokens.push(Token {
        kind: Kind::End,
        position: text.len(),
        length: 1,
    });
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

/// Parses one statement (a trailing `;` is allowed).
pub fn parse(text: &str) -> Result<Statement, ParseError> {
    let mut parser = Parser {
        tokens: lex(text)?,
        at: 0,
    };
    let statement = parser.statement()?;
    parser.punct_if(';');
    parser.end()?;
    Ok(statement)
}

impl Parser {
    fn peek(&self) -> &Token {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[self.at.min(last)]
    }

    fn advance(&mut self) -> Token {
        let token = self.peek().clone();
        if token.kind != Kind::End {
            self.at += 1;
        }
        token
    }

    fn error(&self, token: &Token, expected: &str) -> ParseError {
        ParseError {
            position: token.position,
            length: token.length,
            message: format!("expected {expected}, found {}", token.describe()),
        }
    }

    fn is_keyword(&self, keyword: &str) -> bool {
        matches!(&self.peek().kind, Kind::Word(word) if word.eq_ignore_ascii_case(keyword))
    }

    fn keyword(&mut self, keyword: &str) -> Result<(), ParseError> {
        if self.is_keyword(keyword) {
            self.advance();
            Ok(())
        } else {
            Err(self.error(self.peek(), keyword))
        }
    }

    fn punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.punct_if(c) {
            Ok(())
        } else {
            Err(self.error(self.peek(), &format!("'{c}'")))
        }
    }

    fn punct_if(&mut self, c: char) -> bool {
        if self.peek().kind == Kind::Punct(c) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn end(&mut self) -> Result<(), ParseError> {
        match self.peek().kind {
            Kind::End => Ok(()),
            _ => Err(self.error(self.peek(), "the end of the statement")),
        }
    }

    fn name(&mut self, what: &str) -> Result<String, ParseError> {
        let token = self.peek().clone();
        match token.kind {
            Kind::Word(word) => {
                self.advance();
                Ok(word)
            }
            _ => Err(self.error(&token, what)),
        }
    }

    /// `ns` or `ns.set`.
    fn target(&mut self, set_required: bool) -> Result<(String, Option<String>), ParseError> {
        let namespace = self.name(if set_required {
            "a namespace.set"
        } else {
            "a namespace"
        })?;
        if self.punct_if('.') {
            let set = self.name("a set name")?;
            return Ok((namespace, Some(set)));
        }
        if set_required {
            return Err(self.error(self.peek(), "'.' and a set name"));
        }
        Ok((namespace, None))
    }

    fn statement(&mut self) -> Result<Statement, ParseError> {
        let token = self.peek().clone();
        let Kind::Word(word) = &token.kind else {
            return Err(self.error(
                &token,
                "a statement (SELECT, INSERT, DELETE, SHOW, TRUNCATE, CREATE INDEX, DROP INDEX, EXPLAIN)",
            ));
        };
        match word.to_ascii_uppercase().as_str() {
            "SELECT" => self.select(),
            "INSERT" => self.insert(),
            "DELETE" => self.delete(),
            "SHOW" => {
                self.advance();
                let token = self.advance();
                let what = match &token.kind {
                    Kind::Word(word) => match word.to_ascii_uppercase().as_str() {
                        "NAMESPACES" => Some(ShowWhat::Namespaces),
                        "SETS" => Some(ShowWhat::Sets),
                        "BINS" => Some(ShowWhat::Bins),
                        "INDEXES" | "INDICES" => Some(ShowWhat::Indexes),
                        "UDFS" | "MODULES" => Some(ShowWhat::Udfs),
                        _ => None,
                    },
                    _ => None,
                };
                what.map(Statement::Show)
                    .ok_or_else(|| self.error(&token, "NAMESPACES, SETS, BINS, INDEXES or UDFS"))
            }
            "TRUNCATE" => {
                self.advance();
                let (namespace, set) = self.target(false)?;
                Ok(Statement::Truncate { namespace, set })
            }
            "CREATE" => {
                self.advance();
                self.keyword("INDEX")?;
                let name = self.name("an index name")?;
                self.keyword("ON")?;
                let (namespace, set) = self.target(false)?;
                self.punct('(')?;
                let bin = self.name("a bin name")?;
                self.punct(')')?;
                let token = self.advance();
                let kind = match &token.kind {
                    Kind::Word(word) if word.eq_ignore_ascii_case("NUMERIC") => IndexKind::Numeric,
                    Kind::Word(word) if word.eq_ignore_ascii_case("STRING") => IndexKind::String,
                    _ => return Err(self.error(&token, "NUMERIC or STRING")),
                };
                Ok(Statement::CreateIndex {
                    name,
                    namespace,
                    set,
                    bin,
                    kind,
                })
            }
            "DROP" => {
                self.advance();
                self.keyword("INDEX")?;
                let (namespace, set) = self.target(false)?;
                let name = self.name("an index name")?;
                Ok(Statement::DropIndex {
                    namespace,
                    set,
                    name,
                })
            }
            "EXPLAIN" => {
                self.advance();
                if !self.is_keyword("SELECT") {
                    return Err(self.error(self.peek(), "SELECT after EXPLAIN"));
                }
                Ok(Statement::Explain(Box::new(self.select()?)))
            }
            "SET" => {
                self.advance();
                self.keyword("OUTPUT")?;
                let token = self.advance();
                match &token.kind {
                    Kind::Word(word) if word.eq_ignore_ascii_case("table") => {
                        Ok(Statement::SetOutput(Format::Table))
                    }
                    Kind::Word(word) if word.eq_ignore_ascii_case("json") => {
                        Ok(Statement::SetOutput(Format::Json))
                    }
                    _ => Err(self.error(&token, "TABLE or JSON")),
                }
            }
            "HELP" => {
                self.advance();
                Ok(Statement::Help)
            }
            "QUIT" | "EXIT" => {
                self.advance();
                Ok(Statement::Quit)
            }
            _ => Err(self.error(
                &token,
                "a statement (SELECT, INSERT, DELETE, SHOW, TRUNCATE, CREATE INDEX, DROP INDEX, EXPLAIN)",
            )),
        }
    }

    fn select(&mut self) -> Result<Statement, ParseError> {
        self.keyword("SELECT")?;
        let bins = if self.punct_if('*') {
            None
        } else {
            let mut bins = vec![self.name("'*' or a bin name")?];
            while self.punct_if(',') {
                bins.push(self.name("a bin name")?);
            }
            Some(bins)
        };
        self.keyword("FROM")?;
        let (namespace, set) = self.target(false)?;
        let predicate = if self.is_keyword("WHERE") {
            self.advance();
            Some(self.predicate()?)
        } else {
            None
        };
        let limit = if self.is_keyword("LIMIT") {
            self.advance();
            let token = self.advance();
            match &token.kind {
                Kind::Number(number) => match number.parse::<u64>() {
                    Ok(limit) if limit > 0 => Some(limit),
                    _ => return Err(self.error(&token, "a positive whole number")),
                },
                _ => return Err(self.error(&token, "a number after LIMIT")),
            }
        } else {
            None
        };
        Ok(Statement::Select {
            bins,
            namespace,
            set,
            predicate,
            limit,
        })
    }

    fn predicate(&mut self) -> Result<Predicate, ParseError> {
        let bin = self.name("PK or a bin name")?;
        if bin.eq_ignore_ascii_case("PK") {
            self.punct('=')?;
            return Ok(Predicate::Pk(self.literal()?));
        }
        if self.punct_if('=') {
            return Ok(Predicate::Equals(bin, self.scalar()?));
        }
        if self.is_keyword("BETWEEN") {
            self.advance();
            let low = self.scalar()?;
            self.keyword("AND")?;
            let high = self.scalar()?;
            return Ok(Predicate::Between(bin, low, high));
        }
        Err(self.error(self.peek(), "'=' or BETWEEN"))
    }

    fn insert(&mut self) -> Result<Statement, ParseError> {
        self.keyword("INSERT")?;
        self.keyword("INTO")?;
        let (namespace, set) = self.target(true)?;
        self.punct('(')?;
        let mut names = vec![(self.peek().clone(), self.name("PK or a bin name")?)];
        while self.punct_if(',') {
            names.push((self.peek().clone(), self.name("a bin name")?));
        }
        self.punct(')')?;
        self.keyword("VALUES")?;
        let open = self.peek().clone();
        self.punct('(')?;
        let mut values = vec![self.literal()?];
        while self.punct_if(',') {
            values.push(self.literal()?);
        }
        let close = self.peek().clone();
        self.punct(')')?;
        if values.len() != names.len() {
            return Err(ParseError {
                position: open.position,
                length: close.position + 1 - open.position,
                message: format!("{} names but {} values", names.len(), values.len()),
            });
        }
        let mut pk = None;
        let mut bins = Vec::new();
        for ((token, name), value) in names.into_iter().zip(values) {
            if name.eq_ignore_ascii_case("PK") {
                if pk.is_some() {
                    return Err(ParseError {
                        position: token.position,
                        length: token.length,
                        message: "PK named twice".to_owned(),
                    });
                }
                pk = Some(value);
            } else {
                if name.len() > 15 {
                    return Err(ParseError {
                        position: token.position,
                        length: token.length,
                        message: format!("bin name '{name}' is longer than 15 bytes"),
                    });
                }
                bins.push((name, value));
            }
        }
        let Some(pk) = pk else {
            return Err(ParseError {
                position: open.position,
                length: 1,
                message: "INSERT needs a PK column".to_owned(),
            });
        };
        Ok(Statement::Insert {
            namespace,
            set: set.unwrap_or_default(),
            pk,
            bins,
        })
    }

    fn delete(&mut self) -> Result<Statement, ParseError> {
        self.keyword("DELETE")?;
        self.keyword("FROM")?;
        let (namespace, set) = self.target(true)?;
        self.keyword("WHERE")?;
        let token = self.peek().clone();
        let name = self.name("PK")?;
        if !name.eq_ignore_ascii_case("PK") {
            return Err(self.error(&token, "PK (DELETE removes one record by its key)"));
        }
        self.punct('=')?;
        let pk = self.literal()?;
        Ok(Statement::Delete {
            namespace,
            set: set.unwrap_or_default(),
            pk,
        })
    }

    /// A number, string or boolean.
    fn scalar(&mut self) -> Result<Literal, ParseError> {
        let token = self.peek().clone();
        let literal = self.literal()?;
        if matches!(literal, Literal::Json(_)) {
            return Err(self.error(&token, "a number or a string"));
        }
        Ok(literal)
    }

    fn literal(&mut self) -> Result<Literal, ParseError> {
        let token = self.advance();
        match &token.kind {
            Kind::Number(number) => {
                if let Ok(int) = number.parse::<i64>() {
                    return Ok(Literal::Int(int));
                }
                match number.parse::<f64>() {
                    Ok(float) if float.is_finite() => Ok(Literal::Float(float)),
                    _ => Err(ParseError {
                        position: token.position,
                        length: token.length,
                        message: format!("'{number}' is not a number"),
                    }),
                }
            }
            Kind::Str(text) => Ok(Literal::Str(text.clone())),
            Kind::Word(word) if word.eq_ignore_ascii_case("true") => Ok(Literal::Bool(true)),
            Kind::Word(word) if word.eq_ignore_ascii_case("false") => Ok(Literal::Bool(false)),
            Kind::Word(word)
                if ["JSON", "LIST", "MAP"].contains(&word.to_ascii_uppercase().as_str()) =>
            {
                let kind = word.to_ascii_uppercase();
                self.punct('(')?;
                let text_token = self.advance();
                let Kind::Str(text) = &text_token.kind else {
                    return Err(self.error(&text_token, "a quoted JSON text"));
                };
                let value: serde_json::Value =
                    serde_json::from_str(text).map_err(|error| ParseError {
                        position: text_token.position,
                        length: text_token.length,
                        message: format!("not JSON: {error}"),
                    })?;
                let fits = match kind.as_str() {
                    "LIST" => value.is_array(),
                    "MAP" => value.is_object(),
                    _ => true,
                };
                if !fits {
                    return Err(ParseError {
                        position: text_token.position,
                        length: text_token.length,
                        message: format!(
                            "{kind} takes a JSON {}",
                            if kind == "LIST" { "array" } else { "object" }
                        ),
                    });
                }
                self.punct(')')?;
                Ok(Literal::Json(value))
            }
            _ => Err(self.error(&token, "a value (number, 'string', true, false, JSON('…'))")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_parse() {
        assert_eq!(
            parse("insert into test.demo (PK, a, b) values ('k1', 1, 'x');").unwrap(),
            Statement::Insert {
                namespace: "test".into(),
                set: "demo".into(),
                pk: Literal::Str("k1".into()),
                bins: vec![
                    ("a".into(), Literal::Int(1)),
                    ("b".into(), Literal::Str("x".into()))
                ],
            }
        );
        assert_eq!(
            parse("SELECT a, b FROM test.demo WHERE n BETWEEN -1 AND 2.5 LIMIT 10").unwrap(),
            Statement::Select {
                bins: Some(vec!["a".into(), "b".into()]),
                namespace: "test".into(),
                set: Some("demo".into()),
                predicate: Some(Predicate::Between(
                    "n".into(),
                    Literal::Int(-1),
                    Literal::Float(2.5)
                )),
                limit: Some(10),
            }
        );
        assert_eq!(
            parse("select * from test").unwrap(),
            Statement::Select {
                bins: None,
                namespace: "test".into(),
                set: None,
                predicate: None,
                limit: None
            }
        );
        assert_eq!(
            parse("DELETE FROM test.demo WHERE PK = 7").unwrap(),
            Statement::Delete {
                namespace: "test".into(),
                set: "demo".into(),
                pk: Literal::Int(7)
            }
        );
        assert_eq!(parse("show sets").unwrap(), Statement::Show(ShowWhat::Sets));
        assert_eq!(
            parse("TRUNCATE test.my-set").unwrap(),
            Statement::Truncate {
                namespace: "test".into(),
                set: Some("my-set".into())
            }
        );
        assert_eq!(
            parse("create index idx_n ON test.demo (n) numeric").unwrap(),
            Statement::CreateIndex {
                name: "idx_n".into(),
                namespace: "test".into(),
                set: Some("demo".into()),
                bin: "n".into(),
                kind: IndexKind::Numeric,
            }
        );
        assert_eq!(
            parse("DROP INDEX test idx_s").unwrap(),
            Statement::DropIndex {
                namespace: "test".into(),
                set: None,
                name: "idx_s".into(),
            }
        );
        let error = parse("CREATE INDEX i ON test.demo (n) GEO2DSPHERE").unwrap_err();
        assert_eq!(
            error.message,
            "expected NUMERIC or STRING, found 'GEO2DSPHERE'"
        );
        assert_eq!(error.position, 32);
        assert!(matches!(
            parse("EXPLAIN SELECT * FROM test.demo WHERE PK = 'a'").unwrap(),
            Statement::Explain(_)
        ));
        assert_eq!(
            parse(r#"INSERT INTO t.s (PK, l) VALUES (1, JSON('[1, {"a": "it''s"}]'))"#).unwrap(),
            Statement::Insert {
                namespace: "t".into(),
                set: "s".into(),
                pk: Literal::Int(1),
                bins: vec![(
                    "l".into(),
                    Literal::Json(serde_json::json!([1, {"a": "it's"}]))
                )],
            }
        );
    }

    #[test]
    fn errors_point_at_the_word() {
        let error = parse("SELECT * FORM test.demo").unwrap_err();
        assert_eq!((error.position, error.length), (9, 4));
        assert_eq!(error.message, "expected FROM, found 'FORM'");
        assert_eq!(
            error.render("SELECT * FORM test.demo"),
            "error: expected FROM, found 'FORM'\n  SELECT * FORM test.demo\n           ^^^^"
        );
        let error = parse("INSERT INTO test.demo (PK, a) VALUES (1)").unwrap_err();
        assert_eq!(error.message, "2 names but 1 values");
        let error = parse("INSERT INTO test (PK) VALUES (1)").unwrap_err();
        assert!(
            error.message.starts_with("expected '.' and a set name"),
            "{error}"
        );
        let error = parse("DELETE FROM test.demo WHERE a = 1").unwrap_err();
        assert_eq!(error.position, 28);
        let error = parse("SELECT * FROM test WHERE a = 'x").unwrap_err();
        assert_eq!(error.message, "unterminated string");
        let error = parse("SHOW TABLES").unwrap_err();
        assert_eq!(
            error.message,
            "expected NAMESPACES, SETS, BINS, INDEXES or UDFS, found 'TABLES'"
        );
        let error = parse("SELECT * FROM test LIMIT 0").unwrap_err();
        assert_eq!(error.position, 25);
        let error = parse("SELECT * FROM test extra").unwrap_err();
        assert_eq!(
            error.message,
            "expected the end of the statement, found 'extra'"
        );
        let error = parse("INSERT INTO t.s (PK, m) VALUES (1, MAP('[1]'))").unwrap_err();
        assert_eq!(error.message, "MAP takes a JSON object");
        assert!(parse("").is_err());
        assert!(parse("SELECT * FROM test WHERE PK = ∞").is_err());
    }
}
