//! DynamoDB's condition and update semantics on one item, as pure
//! functions: what the in-memory model evaluates (and the unit tests of
//! the engine's rules use), kept honest against DynamoDB Local by the
//! differential test.

use super::{invalid, Action, Cmp, Cond, InvalidWrite, Item, Value as AttributeValue};

/// Equality as DynamoDB compares values (numbers by value, sets unordered).
pub fn av_eq(a: &AttributeValue, b: &AttributeValue) -> bool {
    use AttributeValue as A;
    match (a, b) {
        (A::N(x), A::N(y)) => num(x) == num(y),
        (A::Ss(x), A::Ss(y)) => sorted(x) == sorted(y),
        (A::Ns(x), A::Ns(y)) => {
            let mut x: Vec<f64> = x.iter().map(|v| num(v)).collect();
            let mut y: Vec<f64> = y.iter().map(|v| num(v)).collect();
            x.sort_by(f64::total_cmp);
            y.sort_by(f64::total_cmp);
            x == y
        }
        (A::L(x), A::L(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| av_eq(a, b)),
        (A::M(x), A::M(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| av_eq(v, w)))
        }
        _ => a == b,
    }
}

fn sorted(x: &[String]) -> Vec<&String> {
    let mut v: Vec<&String> = x.iter().collect();
    v.sort();
    v
}

/// A number attribute's decimal text as a float (NaN when it is not one).
pub fn num(text: &str) -> f64 {
    text.trim().parse().unwrap_or(f64::NAN)
}

/// Ordering of two scalar values of the same type (numbers by value,
/// strings and binaries by bytes); `None` for other pairs.
pub fn av_cmp(a: &AttributeValue, b: &AttributeValue) -> Option<std::cmp::Ordering> {
    use AttributeValue as A;
    match (a, b) {
        (A::N(x), A::N(y)) => num(x).partial_cmp(&num(y)),
        (A::S(x), A::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (A::B(x), A::B(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// DynamoDB refuses an ordering comparison (`<`, `<=`, `>`, `>=`) whose
/// operand is not a number, string or binary, and a `begins_with` whose
/// operand is not a string or binary, whatever the item holds.
pub fn validate(c: &Cond) -> Result<(), InvalidWrite> {
    use AttributeValue as A;
    match c {
        Cond::Compare(_, Cmp::BeginsWith, v) if !matches!(v, A::S(_) | A::B(_)) => Err(invalid(
            "ConditionCheck",
            "ValidationException: Incorrect operand type for operator or function; operator or function: begins_with".to_string(),
        )),
        Cond::Compare(_, op, v) if !matches!(op, Cmp::Eq | Cmp::Ne) && !matches!(v, A::N(_) | A::S(_) | A::B(_)) => Err(invalid(
            "ConditionCheck",
            format!("ValidationException: Incorrect operand type for operator or function; operator: {}", op.as_str()),
        )),
        Cond::Not(c) => validate(c),
        Cond::And(cs) | Cond::Or(cs) => cs.iter().try_for_each(validate),
        _ => Ok(()),
    }
}

/// `a <op> b` as DynamoDB evaluates it: equality by [`av_eq`], ordering
/// only between scalars of one type (false otherwise).
pub fn compare(a: &AttributeValue, op: Cmp, b: &AttributeValue) -> bool {
    use std::cmp::Ordering::*;
    match op {
        Cmp::Eq => av_eq(a, b),
        Cmp::Ne => !av_eq(a, b),
        Cmp::BeginsWith => match (a, b) {
            (AttributeValue::S(x), AttributeValue::S(p)) => x.starts_with(p.as_str()),
            (AttributeValue::B(x), AttributeValue::B(p)) => x.starts_with(p),
            _ => false,
        },
        _ => matches!(
            (op, av_cmp(a, b)),
            (Cmp::Lt, Some(Less))
                | (Cmp::Le, Some(Less | Equal))
                | (Cmp::Gt, Some(Greater))
                | (Cmp::Ge, Some(Greater | Equal))
        ),
    }
}

/// Evaluate a condition on an item (`None`: the item does not exist).
pub fn eval(c: &Cond, item: Option<&Item>) -> bool {
    let get = |a: &str| item.and_then(|i| i.get(a));
    match c {
        Cond::Exists(a) => get(a).is_some(),
        Cond::NotExists(a) => get(a).is_none(),
        // `a <> v` holds for a missing `a`; every other comparison fails.
        Cond::Compare(a, Cmp::Ne, v) => get(a).is_none_or(|x| compare(x, Cmp::Ne, v)),
        Cond::Compare(a, op, v) => get(a).is_some_and(|x| compare(x, *op, v)),
        Cond::In(a, vs) => get(a).is_some_and(|x| vs.iter().any(|v| av_eq(x, v))),
        Cond::Contains(a, v) => match (get(a), v) {
            (Some(AttributeValue::S(x)), AttributeValue::S(y)) => x.contains(y.as_str()),
            (Some(AttributeValue::Ss(x)), AttributeValue::S(y)) => x.contains(y),
            (Some(AttributeValue::Ns(x)), AttributeValue::N(y)) => {
                x.iter().any(|e| num(e) == num(y))
            }
            (Some(AttributeValue::L(x)), v) => x.iter().any(|e| av_eq(e, v)),
            _ => false,
        },
        Cond::SizeLt(a, limit) => get(a).and_then(size_of).is_some_and(|n| n < *limit),
        Cond::Not(c) => !eval(c, item),
        Cond::And(cs) => cs.iter().all(|c| eval(c, item)),
        Cond::Or(cs) => cs.iter().any(|c| eval(c, item)),
    }
}

/// What DynamoDB's `size()` returns for `v`: elements of a set, list or
/// map, bytes of a string or binary; `None` for another type.
fn size_of(v: &AttributeValue) -> Option<u64> {
    use AttributeValue as A;
    let n = match v {
        A::S(x) => x.len(),
        A::B(x) => x.len(),
        A::Ss(x) | A::Ns(x) => x.len(),
        A::Bs(x) => x.len(),
        A::L(x) => x.len(),
        A::M(x) => x.len(),
        _ => return None,
    };
    Some(n as u64)
}

fn add_numbers(a: &str, b: &str) -> String {
    match (a.trim().parse::<i128>(), b.trim().parse::<i128>()) {
        (Ok(x), Ok(y)) => (x + y).to_string(),
        _ => (num(a) + num(b)).to_string(),
    }
}

/// Apply update actions to an item (created from `key` when absent).
pub fn apply(key: &Item, old: Option<&Item>, actions: &[Action]) -> Result<Item, InvalidWrite> {
    const OP: &str = "UpdateItem";
    use AttributeValue as A;
    let mut item = old.cloned().unwrap_or_else(|| key.clone());
    for a in actions {
        if key.contains_key(a.attr()) {
            return Err(invalid(
                OP,
                format!("cannot update key attribute {}", a.attr()),
            ));
        }
        match a {
            Action::Set(n, v) => {
                item.insert(n.clone(), v.clone());
            }
            Action::SetIfNotExists(n, v) => {
                item.entry(n.clone()).or_insert_with(|| v.clone());
            }
            Action::Append(n, vs) => match item.get_mut(n) {
                Some(A::L(l)) => l.extend(vs.iter().cloned()),
                Some(_) => return Err(invalid(OP, format!("{n} is not a list"))),
                None => {
                    item.insert(n.clone(), A::L(vs.clone()));
                }
            },
            Action::Add(n, v) => {
                let next = match (item.get(n), v) {
                    (None, v) => v.clone(),
                    (Some(A::N(x)), A::N(y)) => A::N(add_numbers(x, y)),
                    (Some(A::Ss(x)), A::Ss(y)) => {
                        let mut s = x.clone();
                        s.extend(y.iter().filter(|e| !x.contains(e)).cloned());
                        A::Ss(s)
                    }
                    _ => return Err(invalid(OP, format!("ADD: type mismatch on {n}"))),
                };
                item.insert(n.clone(), next);
            }
            Action::Delete(n, v) => match (item.get(n), v) {
                (None, _) => {}
                (Some(A::Ss(x)), A::Ss(y)) => {
                    let rest: Vec<String> = x.iter().filter(|e| !y.contains(e)).cloned().collect();
                    if rest.is_empty() {
                        item.remove(n);
                    } else {
                        item.insert(n.clone(), A::Ss(rest));
                    }
                }
                _ => return Err(invalid(OP, format!("DELETE: type mismatch on {n}"))),
            },
            Action::Remove(n) => {
                item.remove(n);
            }
        }
    }
    Ok(item)
}
