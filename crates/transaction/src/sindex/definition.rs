//! Secondary index definitions: what `sindex-create` names (namespace,
//! set, bin, value type, collection type, CDT context), parsed from either
//! info syntax, validated, and written back in the ≥ 8.1 syntax, which is
//! also how definitions are kept on disk.
//!
//! Validation and error texts follow the server's `sindex_manager.c`.

use base64::Engine;
use bolide_types::{particle, ResultCode, BIN_NAME_BYTES_MAX, SET_NAME_BYTES_MAX};
use bolide_wire::info::InfoCommand;
use bolide_wire::msgpack::{Item, Reader};

/// Longest index name (the server's `INAME_MAX_SZ` less its terminator).
pub const NAME_BYTES_MAX: usize = 63;
/// Longest base64 CDT context accepted.
pub const CONTEXT_BASE64_BYTES_MAX: usize = 2047;
/// Longest base64 expression accepted (the server's `EXP_B64_MAX_SZ`).
pub const EXPRESSION_BASE64_BYTES_MAX: usize = 16 * 1024 - 1;
/// Most context levels in an index's CDT context.
pub const CONTEXT_DEPTH_MAX: usize = 16;
/// Longest namespace name.
const NAMESPACE_BYTES_MAX: usize = 31;
/// The longest key type name the server's buffer holds ("geo2dsphere").
const KEY_TYPE_BYTES_MAX: usize = 11;

/// The value type an index keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyType {
    Numeric,
    String,
    Blob,
    Geo,
}

/// Where in the bin the indexed values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collection {
    /// The bin's (or context element's) value itself.
    Default,
    /// Each element of a list.
    List,
    /// Each key of a map.
    MapKeys,
    /// Each value of a map.
    MapValues,
}

/// One secondary index definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    pub namespace: String,
    pub name: String,
    /// None: records of every set (and of none).
    pub set: Option<String>,
    pub bin: String,
    pub key_type: KeyType,
    pub collection: Collection,
    /// A msgpack CDT context `[type, value, ...]` leading into the bin.
    pub context: Option<Vec<u8>>,
    /// An expression whose value is indexed instead of a bin (`bin` is
    /// then empty): the packed expression as the client sends it.
    pub expression: Option<Vec<u8>>,
}

/// A refused info request: the result code and the server's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoError {
    pub code: ResultCode,
    pub message: String,
}

impl InfoError {
    pub fn new(code: ResultCode, message: impl Into<String>) -> InfoError {
        InfoError {
            code,
            message: message.into(),
        }
    }

    fn parameter(message: impl Into<String>) -> InfoError {
        InfoError::new(ResultCode::Parameter, message)
    }

    /// The answer text: `ERROR:<code>:<message>`.
    pub fn answer(&self) -> String {
        format!("ERROR:{}:{}", self.code.as_u8(), self.message)
    }
}

impl KeyType {
    pub fn parse(text: &str) -> Option<KeyType> {
        match text.to_ascii_lowercase().as_str() {
            "numeric" => Some(KeyType::Numeric),
            "string" => Some(KeyType::String),
            "blob" => Some(KeyType::Blob),
            "geo2dsphere" => Some(KeyType::Geo),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KeyType::Numeric => "numeric",
            KeyType::String => "string",
            KeyType::Blob => "blob",
            KeyType::Geo => "geo2dsphere",
        }
    }

    /// The particle type a query names for this key type.
    pub fn particle_type(self) -> u8 {
        match self {
            KeyType::Numeric => particle::INTEGER,
            KeyType::String => particle::STRING,
            KeyType::Blob => particle::BLOB,
            KeyType::Geo => particle::GEOJSON,
        }
    }
}

impl Collection {
    pub fn parse(text: &str) -> Option<Collection> {
        match text.to_ascii_lowercase().as_str() {
            "default" => Some(Collection::Default),
            "list" => Some(Collection::List),
            "mapkeys" => Some(Collection::MapKeys),
            "mapvalues" => Some(Collection::MapValues),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Collection::Default => "default",
            Collection::List => "list",
            Collection::MapKeys => "mapkeys",
            Collection::MapValues => "mapvalues",
        }
    }

    /// The INDEX_TYPE field's byte (0 default, 1 list, 2 map keys, 3 map
    /// values).
    pub fn from_wire(byte: u8) -> Option<Collection> {
        match byte {
            0 => Some(Collection::Default),
            1 => Some(Collection::List),
            2 => Some(Collection::MapKeys),
            3 => Some(Collection::MapValues),
            _ => None,
        }
    }
}

impl Definition {
    /// Parses a `sindex-create` request, either syntax:
    /// `namespace=..;set=..;indexname=..;bin=..;type=..[;indextype=..][;context=..]`
    /// (≥ 8.1) or `ns=..;set=..;indexname=..;indexdata=<bin>,<type>[;indextype=..]`.
    pub fn from_create(command: &InfoCommand<'_>) -> Result<Definition, InfoError> {
        let name = required(command, "indexname")?;
        // A value too long for the server's parameter buffer is a bad
        // parameter (`as_info_optional_param_is_ok`), not the index-name
        // result code.
        if name.len() > NAME_BYTES_MAX {
            return Err(InfoError::parameter("'indexname' value too long"));
        }
        if name.contains(['|', '\n', '\t']) {
            return Err(InfoError::parameter("bad 'indexname'"));
        }
        let namespace = namespace_param(command)?;
        if namespace.len() > NAMESPACE_BYTES_MAX {
            return Err(InfoError::new(
                ResultCode::Namespace,
                "'namespace' value too long",
            ));
        }
        let set = match optional(command, "set")? {
            Some(set) if set.len() > SET_NAME_BYTES_MAX => {
                return Err(InfoError::parameter("'set' value too long"))
            }
            Some(set) => Some(set.to_owned()),
            None => None,
        };
        let context = match optional(command, "context")? {
            Some(text) => Some(decode_context(text)?),
            None => None,
        };
        let collection = match optional(command, "indextype")? {
            None => Collection::Default,
            Some(text) if text.eq_ignore_ascii_case("set") => {
                return Err(InfoError::new(
                    ResultCode::UnsupportedFeature,
                    "set indexes are not supported",
                ))
            }
            Some(text) => Collection::parse(text).ok_or_else(|| {
                InfoError::parameter(
                    "bad 'indextype' - must be one of 'default', 'list', 'mapkeys', 'mapvalues'",
                )
            })?,
        };
        let indexdata = optional(command, "indexdata")?;
        let type_text = optional(command, "type")?;
        let mut expression = None;
        let (bin, key_type) = match (indexdata, type_text) {
            (None, None) => {
                return Err(InfoError::parameter(
                    "both 'indexdata' and 'type' are missing",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(InfoError::parameter(
                    "both 'indexdata' and 'type' are specified",
                ))
            }
            (None, Some(type_text)) => {
                let key_type = KeyType::parse(type_text).ok_or_else(|| {
                    InfoError::parameter(
                        "bad 'type' - must be one of 'numeric', 'string', 'blob', 'geo2dsphere'",
                    )
                })?;
                match (optional(command, "bin")?, optional(command, "exp")?) {
                    (Some(_), Some(_)) => {
                        return Err(InfoError::parameter("both 'bin' and 'exp' are specified"))
                    }
                    (None, None) => {
                        return Err(InfoError::parameter("both 'bin' and 'exp' are missing"))
                    }
                    (Some(bin), None) => {
                        if bin.len() > BIN_NAME_BYTES_MAX {
                            return Err(InfoError::parameter("'bin' value too long"));
                        }
                        (bin.to_owned(), key_type)
                    }
                    (None, Some(text)) => {
                        if context.is_some() {
                            return Err(InfoError::parameter(
                                "both 'context' and 'exp' are specified",
                            ));
                        }
                        expression = Some(decode_expression(text)?);
                        (String::new(), key_type)
                    }
                }
            }
            (Some(indexdata), None) => {
                // `bin,type` in the server's buffer of a bin name and a type.
                if indexdata.len() > BIN_NAME_BYTES_MAX + KEY_TYPE_BYTES_MAX + 1 {
                    return Err(InfoError::parameter("'indexdata' value too long"));
                }
                let (bin, type_text) = indexdata
                    .split_once(',')
                    .ok_or_else(|| InfoError::parameter("'indexdata' missing bin type"))?;
                if bin.is_empty() {
                    return Err(InfoError::parameter("'indexdata' missing bin name"));
                }
                if bin.len() > BIN_NAME_BYTES_MAX {
                    return Err(InfoError::parameter("'indexdata' bin name too long"));
                }
                let key_type = KeyType::parse(type_text).ok_or_else(|| {
                    InfoError::parameter(
                        "bad 'indexdata' bin type - must be one of 'numeric', 'string', 'blob', 'geo2dsphere'",
                    )
                })?;
                (bin.to_owned(), key_type)
            }
        };
        if collection == Collection::MapKeys && key_type == KeyType::Geo {
            return Err(InfoError::parameter(
                "bad 'indexdata' bin type for 'indextype' 'mapkeys' - must be one of 'numeric', 'string', 'blob'",
            ));
        }
        Ok(Definition {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            set,
            bin,
            key_type,
            collection,
            context,
            expression,
        })
    }

    /// The definition without its name: two definitions with the same key
    /// are the same index (a create under another name renames it).
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}",
            self.namespace,
            self.set.as_deref().unwrap_or(""),
            self.bin,
            self.context_base64().unwrap_or_default(),
            self.expression_base64().unwrap_or_default(),
            self.collection.name(),
            self.key_type.name()
        )
    }

    /// The expression as base64, as `sindex-list` shows it.
    pub fn expression_base64(&self) -> Option<String> {
        self.expression
            .as_ref()
            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The context as base64, as `sindex-list` shows it.
    pub fn context_base64(&self) -> Option<String> {
        self.context
            .as_ref()
            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The ≥ 8.1 `sindex-create` parameters that recreate this definition;
    /// also its line in the definitions file.
    pub fn to_command(&self) -> String {
        let mut text = format!("namespace={}", self.namespace);
        if let Some(set) = &self.set {
            text.push_str(";set=");
            text.push_str(set);
        }
        text.push_str(";indexname=");
        text.push_str(&self.name);
        match self.expression_base64() {
            Some(expression) => {
                text.push_str(";exp=");
                text.push_str(&expression);
            }
            None => {
                text.push_str(";bin=");
                text.push_str(&self.bin);
            }
        }
        text.push_str(";type=");
        text.push_str(self.key_type.name());
        text.push_str(";indextype=");
        text.push_str(self.collection.name());
        if let Some(context) = self.context_base64() {
            text.push_str(";context=");
            text.push_str(&context);
        }
        text
    }
}

/// `namespace=` or its alias `ns=`, required.
fn namespace_param<'a>(command: &InfoCommand<'a>) -> Result<&'a str, InfoError> {
    match command.param("namespace").or_else(|| command.param("ns")) {
        None => Err(InfoError::new(ResultCode::Namespace, "missing 'namespace'")),
        Some("") => Err(InfoError::new(
            ResultCode::Namespace,
            "missing 'namespace' value",
        )),
        Some(name) => Ok(name),
    }
}

/// The namespace a non-create command names (`namespace=` or `ns=`).
pub fn namespace_of<'a>(command: &InfoCommand<'a>) -> Result<&'a str, InfoError> {
    namespace_param(command)
}

/// A required parameter: missing or empty is an error.
pub fn required<'a>(command: &InfoCommand<'a>, key: &str) -> Result<&'a str, InfoError> {
    optional(command, key)?.ok_or_else(|| InfoError::parameter(format!("missing '{key}'")))
}

/// An optional parameter: given but empty is an error.
fn optional<'a>(command: &InfoCommand<'a>, key: &str) -> Result<Option<&'a str>, InfoError> {
    match command.param(key) {
        None => Ok(None),
        Some("") => Err(InfoError::parameter(format!("missing '{key}' value"))),
        Some(value) => Ok(Some(value)),
    }
}

/// Decodes and checks a base64 CDT context.
fn decode_context(text: &str) -> Result<Vec<u8>, InfoError> {
    if text.len() > CONTEXT_BASE64_BYTES_MAX {
        return Err(InfoError::parameter("'context' value too long"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| InfoError::parameter("'context' invalid base64"))?;
    check_context(&bytes).map_err(|_| InfoError::parameter("'context' invalid cdt context"))?;
    Ok(bytes)
}

/// Decodes and checks a base64 expression (it must parse).
fn decode_expression(text: &str) -> Result<Vec<u8>, InfoError> {
    if text.len() > EXPRESSION_BASE64_BYTES_MAX {
        return Err(InfoError::parameter("'exp' value too long"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| InfoError::parameter("bad 'exp'"))?;
    bolide_particles::expression::parse(&bytes).map_err(|_| InfoError::parameter("bad 'exp'"))?;
    Ok(bytes)
}

/// A CDT context: a msgpack array of an even, non-zero number of items,
/// alternating a context type (a list or map type with index, rank, key or
/// value) and a selector value, and nothing after it.
pub fn check_context(bytes: &[u8]) -> Result<(), ResultCode> {
    let mut reader = Reader::new(bytes);
    let Ok(Item::Array(count)) = reader.item() else {
        return Err(ResultCode::Parameter);
    };
    if count == 0 || count % 2 != 0 || count as usize / 2 > CONTEXT_DEPTH_MAX {
        return Err(ResultCode::Parameter);
    }
    for _ in 0..count / 2 {
        let kind = match reader.item() {
            Ok(Item::Int(kind)) if kind >= 0 => kind as u64,
            Ok(Item::Uint(kind)) => kind,
            _ => return Err(ResultCode::Parameter),
        };
        if kind & !0x3f != 0 {
            return Err(ResultCode::Parameter);
        }
        let base = kind & 0x0f;
        let is_list = kind & 0x10 != 0;
        let is_map = kind & 0x20 != 0;
        if is_list == is_map || base > 3 || (is_list && base == 2) {
            return Err(ResultCode::Parameter);
        }
        bolide_particles::cdt::value::next_item(&mut reader)?;
    }
    if !reader.remaining().is_empty() {
        return Err(ResultCode::Parameter);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Definition, InfoError> {
        Definition::from_create(&InfoCommand::parse(text))
    }

    #[test]
    fn both_syntaxes_give_the_same_definition() {
        let new = parse("sindex-create:namespace=test;set=demo;indexname=a;bin=age;type=numeric")
            .expect("new syntax");
        let old = parse("sindex-create:ns=test;set=demo;indexname=a;indexdata=age,NUMERIC")
            .expect("old syntax");
        assert_eq!(new, old);
        assert_eq!(new.key_type, KeyType::Numeric);
        assert_eq!(new.collection, Collection::Default);
        let again = parse(&format!("sindex-create:{}", new.to_command())).expect("round trip");
        assert_eq!(again, new);
    }

    #[test]
    fn expression_indexes_round_trip() {
        // The integer 7 as an expression.
        let definition = parse("sindex-create:namespace=test;indexname=e;exp=Bw==;type=numeric")
            .expect("expression index");
        assert_eq!(definition.expression.as_deref(), Some(&[7u8][..]));
        assert!(definition.bin.is_empty());
        let again =
            parse(&format!("sindex-create:{}", definition.to_command())).expect("round trip");
        assert_eq!(again, definition);
        let error =
            parse("sindex-create:namespace=test;indexname=e;exp=Bw==;type=numeric;context=kiIB")
                .expect_err("context and exp");
        assert_eq!(error.code, ResultCode::Parameter);
    }

    #[test]
    fn contexts_round_trip_and_bad_ones_are_refused() {
        // [map key ctx (0x22), "a"] as msgpack: 0x92 0x22 0xa2 0x03 'a'.
        let context = base64::engine::general_purpose::STANDARD.encode([0x92, 0x22, 0xa2, 3, b'a']);
        let definition = parse(&format!(
            "sindex-create:namespace=test;indexname=c;bin=m;type=string;context={context}"
        ))
        .expect("context");
        assert_eq!(
            definition.context_base64().as_deref(),
            Some(context.as_str())
        );
        for bad in ["!!!", "kA==", "kQE=", "ksA=", "kgcB"] {
            let error = parse(&format!(
                "sindex-create:namespace=test;indexname=c;bin=m;type=string;context={bad}"
            ))
            .expect_err(bad);
            assert_eq!(error.code, ResultCode::Parameter, "{bad}");
        }
    }

    #[test]
    fn hostile_definitions_answer_errors() {
        let cases: &[(&str, ResultCode)] = &[
            (
                "sindex-create:namespace=test;bin=a;type=numeric",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:indexname=x;bin=a;type=numeric",
                ResultCode::Namespace,
            ),
            (
                "sindex-create:namespace=;indexname=x;bin=a;type=numeric",
                ResultCode::Namespace,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=a",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=a;type=float",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;type=numeric",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=0123456789abcdefg;type=numeric",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;indexdata=a",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;indexdata=,numeric",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;indexdata=a,numeric;type=numeric",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=a;type=numeric;indextype=tree",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=a;type=geo2dsphere;indextype=mapkeys",
                ResultCode::Parameter,
            ),
            (
                "sindex-create:namespace=test;indexname=x;bin=a;type=numeric;set=",
                ResultCode::Parameter,
            ),
        ];
        for (text, code) in cases {
            let error = parse(text).expect_err(text);
            assert_eq!(error.code, *code, "{text}: {}", error.message);
        }
        let long_name = "n".repeat(64);
        let error = parse(&format!(
            "sindex-create:namespace=test;indexname={long_name};bin=a;type=numeric"
        ))
        .expect_err("long name");
        assert_eq!(error.code, ResultCode::Parameter);
        assert_eq!(error.message, "'indexname' value too long");
        let error =
            parse("sindex-create:namespace=test;indexname=x;bin=abcdefghijklmnop;type=numeric")
                .expect_err("long bin");
        assert_eq!(error.code, ResultCode::Parameter);
        assert_eq!(error.message, "'bin' value too long");
    }
}
