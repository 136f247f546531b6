//! GGUF metadata values and the key/value store that holds them.

use std::collections::HashMap;
use std::fmt;

/// The type tag of a metadata value, as stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Fewest bytes one value of this type can take in a file. Used to refuse element counts
    /// that the rest of the file could not possibly hold, before allocating for them.
    pub fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            String => 8,
            Array => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value. Arrays carry their element type so an empty array keeps it, and so a
/// writer can reproduce the file exactly.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as a signed integer if it is any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::I8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an unsigned integer if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// The value as a float if it is any numeric type (integers converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<(ValueType, &[Value])> {
        match self {
            Value::Array(t, v) => Some((*t, v)),
            _ => None,
        }
    }

    /// A one-line rendering; arrays longer than `max_items` are summarised.
    pub fn summary(&self, max_items: usize) -> String {
        match self {
            Value::String(s) => format!("{s:?}"),
            Value::Array(t, items) => {
                let shown: Vec<String> = items
                    .iter()
                    .take(max_items)
                    .map(|v| v.summary(max_items))
                    .collect();
                if items.len() > max_items {
                    format!("[{t}; {}] [{}, ...]", items.len(), shown.join(", "))
                } else {
                    format!("[{}]", shown.join(", "))
                }
            }
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => f.write_str(s),
            Value::Array(..) => f.write_str(&self.summary(usize::MAX)),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
        }
    }
}

/// Why a typed metadata lookup failed; names the key so the user knows what the file lacks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata key `{0}` is missing")]
    Missing(String),
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
}

/// Metadata in file order, with lookup by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Inserts or replaces `key`. Returns the previous value.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        if let Some(&i) = self.index.get(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, value));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        None
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn require(&self, key: &str) -> Result<&Value, MetadataError> {
        self.get(key)
            .ok_or_else(|| MetadataError::Missing(key.to_string()))
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> MetadataError {
        MetadataError::WrongType {
            key: key.to_string(),
            expected,
            found: v.value_type().to_string(),
        }
    }

    /// An integer of any width that is non-negative.
    pub fn get_u64(&self, key: &str) -> Result<u64, MetadataError> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "unsigned integer", v))
    }

    /// Like [`Metadata::get_u64`] but `None` when absent (still an error when mistyped).
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, MetadataError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_u64(key).map(Some),
        }
    }

    pub fn get_f64(&self, key: &str) -> Result<f64, MetadataError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "number", v))
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, MetadataError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_f64(key).map(Some),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, MetadataError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong(key, "bool", v))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, MetadataError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_bool(key).map(Some),
        }
    }

    pub fn get_str(&self, key: &str) -> Result<&str, MetadataError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, MetadataError> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.get_str(key).map(Some),
        }
    }

    pub fn get_array(&self, key: &str) -> Result<(ValueType, &[Value]), MetadataError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "array", v))
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, MetadataError> {
        let (_, items) = self.get_array(key)?;
        items
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| Self::wrong(key, "array of string", v))
            })
            .collect()
    }

    /// An array of numbers converted to f32 (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, MetadataError> {
        let (_, items) = self.get_array(key)?;
        items
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| Self::wrong(key, "array of number", v))
            })
            .collect()
    }

    /// An array of integers (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>, MetadataError> {
        let (_, items) = self.get_array(key)?;
        items
            .iter()
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| Self::wrong(key, "array of integer", v))
            })
            .collect()
    }
}
