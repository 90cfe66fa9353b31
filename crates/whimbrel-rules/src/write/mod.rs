//! Typed conditions and update actions: what the engine decides, as data.
//!
//! The engine never writes DynamoDB expression strings. It builds a
//! [`Cond`] and a list of [`Action`]s; the DynamoDB backend
//! (`store::dynamo`) translates them to `ConditionExpression` /
//! `UpdateExpression` text, and the in-memory backend (`store::memory`)
//! evaluates them directly with DynamoDB's semantics. Only top-level
//! attributes are addressed (every Whimbrel attribute is top-level).

pub mod eval;
pub mod price;
pub mod size;

use std::collections::HashMap;

use serde::Serialize;

/// One attribute value, as DynamoDB types it (`S`, `N`, `M`, `L`, `SS`...).
/// The rules build writes in this library type (serde_dynamo's, which has
/// no AWS SDK behind it); the DynamoDB store converts it to the SDK's
/// `AttributeValue` at its boundary.
pub use serde_dynamo::AttributeValue as Value;
use Value as AttributeValue;

/// An item: attribute name to value, every Whimbrel attribute top-level.
pub type Item = HashMap<String, Value>;

/// A write the rules built that DynamoDB would refuse as invalid (a
/// `ValidationException`): an operand of the wrong type, an item over
/// 400 KB. Retrying it is pointless.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op}: invalid request: {message}")]
pub struct InvalidWrite {
    /// The operation, e.g. `UpdateItem`.
    pub op: &'static str,
    /// Why DynamoDB would refuse it.
    pub message: String,
}

/// The text of a string value (`S`), `None` for any other type.
pub fn as_s(v: &Value) -> Option<&String> {
    match v {
        Value::S(s) => Some(s),
        _ => None,
    }
}

/// The elements of a string set value (`SS`), `None` for any other type.
pub fn as_ss(v: &Value) -> Option<&Vec<String>> {
    match v {
        Value::Ss(xs) => Some(xs),
        _ => None,
    }
}

/// An [`InvalidWrite`] of `op`.
pub fn invalid(op: &'static str, message: impl Into<String>) -> InvalidWrite {
    InvalidWrite {
        op,
        message: message.into(),
    }
}

/// A comparison operator of a condition or a key condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `begins_with(a, v)`: a string (or binary) prefix; a function in
    /// DynamoDB's syntax, not an infix operator (see [`Cmp::render`]).
    BeginsWith,
}

impl Cmp {
    /// The operator as DynamoDB spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Ne => "<>",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::BeginsWith => "begins_with",
        }
    }

    /// `a <op> v` in DynamoDB's expression syntax, given the placeholders
    /// of the attribute name and the value: `#a >= :v`, or
    /// `begins_with(#a, :v)`.
    pub fn render(self, name: &str, value: &str) -> String {
        match self {
            Cmp::BeginsWith => format!("begins_with({name}, {value})"),
            op => format!("{name} {} {value}", op.as_str()),
        }
    }
}

/// A condition on one item (DynamoDB `ConditionExpression`). A comparison
/// with a missing attribute is false, as in DynamoDB.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// `attribute_exists(a)`
    Exists(String),
    /// `attribute_not_exists(a)`
    NotExists(String),
    /// `a <op> v`
    Compare(String, Cmp, AttributeValue),
    /// `a IN (v1, v2, ...)`
    In(String, Vec<AttributeValue>),
    /// `contains(a, v)`: a string contains a substring, or a set or list
    /// holds an element.
    Contains(String, AttributeValue),
    /// `size(a) < n`: the elements of a set, list or map, or the bytes of
    /// a string or binary, fewer than `n`; false for a missing `a`.
    SizeLt(String, u64),
    /// `NOT (c)`
    Not(Box<Cond>),
    /// `(c1) AND (c2) ...`; true when empty.
    And(Vec<Cond>),
    /// `(c1) OR (c2) ...`; false when empty.
    Or(Vec<Cond>),
}

impl Cond {
    /// `a = v`
    pub fn eq(attr: &str, v: AttributeValue) -> Cond {
        Cond::Compare(attr.into(), Cmp::Eq, v)
    }
    /// `a < v`
    pub fn lt(attr: &str, v: AttributeValue) -> Cond {
        Cond::Compare(attr.into(), Cmp::Lt, v)
    }
    /// `attribute_exists(a)`
    pub fn exists(attr: &str) -> Cond {
        Cond::Exists(attr.into())
    }
    /// `attribute_not_exists(a)`
    pub fn not_exists(attr: &str) -> Cond {
        Cond::NotExists(attr.into())
    }
    /// `NOT contains(a, v)`
    pub fn not_contains(attr: &str, v: AttributeValue) -> Cond {
        Cond::Not(Box::new(Cond::Contains(attr.into(), v)))
    }
    /// `self AND other`, flattening nested ANDs.
    pub fn and(self, other: Cond) -> Cond {
        match (self, other) {
            (Cond::And(mut a), Cond::And(b)) => {
                a.extend(b);
                Cond::And(a)
            }
            (Cond::And(mut a), c) => {
                a.push(c);
                Cond::And(a)
            }
            (c, Cond::And(mut b)) => {
                b.insert(0, c);
                Cond::And(b)
            }
            (a, b) => Cond::And(vec![a, b]),
        }
    }
}

/// One action of an UpdateItem (DynamoDB `UpdateExpression` clauses).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `SET a = v`
    Set(String, AttributeValue),
    /// `SET a = if_not_exists(a, v)`
    SetIfNotExists(String, AttributeValue),
    /// `SET a = list_append(if_not_exists(a, []), v)`; `v` is a list.
    Append(String, Vec<AttributeValue>),
    /// `ADD a v`: a number is added (missing counts 0), a set is unioned.
    Add(String, AttributeValue),
    /// `DELETE a v`: the elements of set `v` are removed from set `a`.
    Delete(String, AttributeValue),
    /// `REMOVE a`
    Remove(String),
}

impl Action {
    /// The attribute the action changes.
    pub fn attr(&self) -> &str {
        match self {
            Action::Set(a, _)
            | Action::SetIfNotExists(a, _)
            | Action::Append(a, _)
            | Action::Add(a, _)
            | Action::Delete(a, _)
            | Action::Remove(a) => a,
        }
    }
}

/// A key condition of a Query: the hash key equals a value, and optionally
/// the range key compares with one.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCond {
    /// Hash key attribute and value.
    pub hash: (String, AttributeValue),
    /// Range key attribute, operator and value.
    pub range: Option<(String, Cmp, AttributeValue)>,
}

/// One write of a transaction (TransactWriteItems element).
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A PutItem of a whole item.
    Put {
        /// Table name.
        table: String,
        /// The item, keys included.
        item: Item,
        /// Condition on the item it replaces.
        cond: Option<Cond>,
    },
    /// An UpdateItem.
    Update {
        /// Table name.
        table: String,
        /// The item's full primary key.
        key: Item,
        /// The changes.
        actions: Vec<Action>,
        /// Condition on the item before the change.
        cond: Option<Cond>,
    },
}

impl Write {
    /// The table written.
    pub fn table(&self) -> &str {
        match self {
            Write::Put { table, .. } | Write::Update { table, .. } => table,
        }
    }
}

/// Convert a value to an attribute value; panics only on types serde_dynamo
/// cannot represent, which the engine never passes.
pub fn av<T: Serialize>(v: &T) -> AttributeValue {
    serde_dynamo::to_attribute_value(v).expect("value representable as a DynamoDB attribute")
}

/// A string attribute value.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// A number attribute value.
pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// An UpdateItem the engine decided: table, key, typed actions and
/// condition. Run alone (`whimbrel_core::store::Store::update`) or in a
/// transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRequest {
    /// Table name.
    pub table: String,
    /// Full primary key.
    pub key: Item,
    /// The changes.
    pub actions: Vec<Action>,
    /// Condition on the item before the change.
    pub cond: Option<Cond>,
}

impl UpdateRequest {
    /// A new request on `table` for `key`, with no action yet.
    pub fn new(table: String, key: Item) -> Self {
        UpdateRequest {
            table,
            key,
            actions: vec![],
            cond: None,
        }
    }
    /// Add an action.
    pub fn act(mut self, a: Action) -> Self {
        self.actions.push(a);
        self
    }
    /// `SET attr = v`.
    pub fn set(self, attr: &str, v: AttributeValue) -> Self {
        self.act(Action::Set(attr.into(), v))
    }
    /// `REMOVE attr`.
    pub fn remove(self, attr: &str) -> Self {
        self.act(Action::Remove(attr.into()))
    }
    /// AND a condition to the existing one.
    pub fn when(mut self, c: Cond) -> Self {
        self.cond = Some(match self.cond.take() {
            Some(old) => old.and(c),
            None => c,
        });
        self
    }
    /// As one element of a transaction.
    pub fn into_write(self) -> Write {
        Write::Update {
            table: self.table,
            key: self.key,
            actions: self.actions,
            cond: self.cond,
        }
    }
}
