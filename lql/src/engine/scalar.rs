//! SELECT's scalar functions, CAST and `||`, with SQLite's semantics (the binder has
//! checked the argument types; NULL in gives NULL out unless the function says otherwise).

use std::cmp::Ordering;

use lql_grammar::{CastType, ScalarFunc};

use super::rowexec::{compare, sort_cmp};
use crate::error::{Error, Result};
use crate::value::Value;

/// A REAL as SQLite writes it (`printf("%!.15g")`): 15 significant digits, a `.0` on whole
/// numbers, exponent form outside 1e-4 ..< 1e15.
pub(crate) fn real_text(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            String::new()
        } else if f > 0.0 {
            "Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0.0".into();
    }
    // The 15-significant-digit mantissa and exponent.
    let sci = format!("{:.14e}", f);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, digits) = match mant.strip_prefix('-') {
        Some(m) => (true, m.replace('.', "")),
        None => (false, mant.replace('.', "")),
    };
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let sign = if neg { "-" } else { "" };
    if !(-4..15).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        return format!(
            "{sign}{first}.{rest}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        );
    }
    let n = digits.len() as i32;
    if exp >= 0 {
        let int_len = exp + 1;
        if n <= int_len {
            format!("{sign}{}{}.0", digits, "0".repeat((int_len - n) as usize))
        } else {
            let (a, b) = digits.split_at(int_len as usize);
            format!("{sign}{a}.{b}")
        }
    } else {
        format!("{sign}0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    }
}

/// A value as text, as SQLite converts it (booleans are the integers 1 and 0).
pub(crate) fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Null | Value::List(_) => None,
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.into()),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(real_text(*f)),
        Value::Text(s) => Some(s.clone()),
    }
}

/// The longest prefix of `s` (after leading spaces) that reads as a number, as SQLite's
/// CAST reads text: (`Some(int)` when it is a whole number, its value as a float).
fn numeric_prefix(s: &str) -> (Option<i64>, f64) {
    let t = s.trim_start();
    let b = t.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_end = i;
    let mut is_int = int_end > digits_start;
    if i < b.len() && b[i] == b'.' {
        let j = i + 1;
        let mut k = j;
        while k < b.len() && b[k].is_ascii_digit() {
            k += 1;
        }
        if k > j || int_end > digits_start {
            i = k;
            is_int = false;
        }
    }
    if i > digits_start && i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut k = i + 1;
        if k < b.len() && (b[k] == b'+' || b[k] == b'-') {
            k += 1;
        }
        let ds = k;
        while k < b.len() && b[k].is_ascii_digit() {
            k += 1;
        }
        if k > ds {
            i = k;
            is_int = false;
        }
    }
    let f = t[..i].parse::<f64>().unwrap_or(0.0);
    let int = if is_int {
        t[..int_end].parse::<i64>().ok()
    } else {
        None
    };
    (int, f)
}

/// `CAST(v AS to)`.
pub(crate) fn cast(v: &Value, to: CastType) -> Result<Value> {
    Ok(match (v, to) {
        (Value::Null, _) => Value::Null,
        (Value::List(_), _) => return Err(Error::semantic("CAST cannot convert a list")),
        (_, CastType::Text) => Value::Text(text_of(v).unwrap_or_default()),
        (Value::Bool(b), CastType::Integer) => Value::Int(*b as i64),
        (Value::Bool(b), CastType::Real) => Value::Float(*b as i64 as f64),
        (Value::Int(i), CastType::Integer) => Value::Int(*i),
        (Value::Int(i), CastType::Real) => Value::Float(*i as f64),
        (Value::Float(f), CastType::Integer) => Value::Int(float_to_int(*f)),
        (Value::Float(f), CastType::Real) => Value::Float(*f),
        (Value::Text(s), CastType::Integer) => {
            let (int, f) = numeric_prefix(s);
            Value::Int(int.unwrap_or_else(|| float_to_int(f)))
        }
        (Value::Text(s), CastType::Real) => Value::Float(numeric_prefix(s).1),
    })
}

/// A float to an integer as SQLite converts it: toward zero, clamped to the i64 range.
fn float_to_int(f: f64) -> i64 {
    if f.is_nan() {
        0
    } else if f >= i64::MAX as f64 {
        i64::MAX
    } else if f <= i64::MIN as f64 {
        i64::MIN
    } else {
        f.trunc() as i64
    }
}

/// `a || b`.
pub(crate) fn concat(a: &Value, b: &Value) -> Value {
    match (text_of(a), text_of(b)) {
        (Some(x), Some(y)) => Value::Text(x + &y),
        _ => Value::Null,
    }
}

/// SQLite's `substr(s, start[, len])` over characters (1-based; a negative start counts
/// from the end; a negative length takes the characters before start).
fn substr(s: &str, start: i64, len: Option<i64>) -> String {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    let mut p1 = start;
    let (mut p2, neg) = match len {
        Some(l) if l < 0 => (-l, true),
        Some(l) => (l, false),
        None => (i64::MAX / 4, false),
    };
    if p1 < 0 {
        p1 += n;
        if p1 < 0 {
            p2 += p1;
            if p2 < 0 {
                p2 = 0;
            }
            p1 = 0;
        }
    } else if p1 > 0 {
        p1 -= 1;
    } else if p2 > 0 {
        p2 -= 1;
    }
    if neg {
        p1 -= p2;
        if p1 < 0 {
            p2 += p1;
            p1 = 0;
        }
    }
    let from = p1.clamp(0, n) as usize;
    let to = (p1.saturating_add(p2)).clamp(0, n) as usize;
    if from >= to {
        return String::new();
    }
    chars[from..to].iter().collect()
}

fn trim(s: &str, chars: &str, left: bool, right: bool) -> String {
    let set: Vec<char> = chars.chars().collect();
    let mut t = s;
    if left {
        t = t.trim_start_matches(|c| set.contains(&c));
    }
    if right {
        t = t.trim_end_matches(|c| set.contains(&c));
    }
    t.to_string()
}

/// `round(x, digits)`: half away from zero, as SQLite rounds.
fn round(x: f64, digits: i64) -> f64 {
    let d = digits.clamp(0, 30) as i32;
    if d == 0 {
        return x.round();
    }
    // Through the decimal text of the value (as SQLite does), so 2.5 -> 3 and 0.125 at two
    // digits follow the written digits rather than a scaled product's error.
    let text = format!("{:.*}", (d + 2) as usize, x);
    let scaled: f64 = text.parse::<f64>().unwrap_or(x) * 10f64.powi(d);
    let r = scaled.round() / 10f64.powi(d);
    if r.is_finite() {
        r
    } else {
        x
    }
}

/// Calls `func` on evaluated arguments.
pub(crate) fn call(func: ScalarFunc, args: &[Value]) -> Result<Value> {
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    let text = |i: usize| text_of(arg(i));
    let int = |i: usize| match arg(i) {
        Value::Int(v) => Some(*v),
        Value::Float(f) => Some(float_to_int(*f)),
        Value::Bool(b) => Some(*b as i64),
        _ => None,
    };
    Ok(match func {
        ScalarFunc::Abs => match arg(0) {
            Value::Int(i) => i
                .checked_abs()
                .map_or(Value::Float((*i as f64).abs()), Value::Int),
            Value::Float(f) => Value::Float(f.abs()),
            Value::Bool(b) => Value::Int(*b as i64),
            _ => Value::Null,
        },
        ScalarFunc::Round => {
            let x = match arg(0) {
                Value::Int(i) => *i as f64,
                Value::Float(f) => *f,
                Value::Bool(b) => *b as i64 as f64,
                _ => return Ok(Value::Null),
            };
            let digits = if args.len() > 1 {
                match int(1) {
                    Some(d) => d,
                    None => return Ok(Value::Null),
                }
            } else {
                0
            };
            Value::Float(round(x, digits))
        }
        ScalarFunc::Lower => text(0).map_or(Value::Null, |s| Value::Text(s.to_ascii_lowercase())),
        ScalarFunc::Upper => text(0).map_or(Value::Null, |s| Value::Text(s.to_ascii_uppercase())),
        ScalarFunc::Length => text(0).map_or(Value::Null, |s| Value::Int(s.chars().count() as i64)),
        ScalarFunc::Substr => {
            let (Some(s), Some(start)) = (text(0), int(1)) else {
                return Ok(Value::Null);
            };
            let len = if args.len() > 2 {
                match int(2) {
                    Some(l) => Some(l),
                    None => return Ok(Value::Null),
                }
            } else {
                None
            };
            Value::Text(substr(&s, start, len))
        }
        ScalarFunc::Coalesce | ScalarFunc::Ifnull => args
            .iter()
            .find(|v| !v.is_null())
            .cloned()
            .unwrap_or(Value::Null),
        // NULL exactly when `a = b` holds.
        ScalarFunc::Nullif => match compare(arg(0), arg(1)) {
            Some(Ordering::Equal) => Value::Null,
            _ => arg(0).clone(),
        },
        ScalarFunc::Trim | ScalarFunc::Ltrim | ScalarFunc::Rtrim => {
            let Some(s) = text(0) else {
                return Ok(Value::Null);
            };
            let chars = if args.len() > 1 {
                match text(1) {
                    Some(c) => c,
                    None => return Ok(Value::Null),
                }
            } else {
                " ".to_string()
            };
            let (l, r) = match func {
                ScalarFunc::Ltrim => (true, false),
                ScalarFunc::Rtrim => (false, true),
                _ => (true, true),
            };
            Value::Text(trim(&s, &chars, l, r))
        }
        ScalarFunc::Replace => match (text(0), text(1), text(2)) {
            (Some(s), Some(from), Some(to)) => {
                if from.is_empty() {
                    Value::Text(s)
                } else {
                    Value::Text(s.replace(&from, &to))
                }
            }
            _ => Value::Null,
        },
        ScalarFunc::Instr => match (text(0), text(1)) {
            (Some(s), Some(sub)) => Value::Int(match s.find(&sub) {
                Some(byte) => s[..byte].chars().count() as i64 + 1,
                None => 0,
            }),
            _ => Value::Null,
        },
        ScalarFunc::Min | ScalarFunc::Max => {
            if args.iter().any(|v| v.is_null()) {
                return Ok(Value::Null);
            }
            // The order the min/max aggregates use (the binder gave the arguments one type).
            let mut best = arg(0);
            for v in &args[1..] {
                let o = sort_cmp(v, best);
                if (func == ScalarFunc::Min && o == Ordering::Less)
                    || (func == ScalarFunc::Max && o == Ordering::Greater)
                {
                    best = v;
                }
            }
            best.clone()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_are_written_as_sqlite_writes_them() {
        for (f, want) in [
            (1.0, "1.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.3"),
            (-2.5, "-2.5"),
            (1e15, "1.0e+15"),
            (123456789012345.0, "123456789012345.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (2.71, "2.71"),
        ] {
            assert_eq!(real_text(f), want, "{f}");
        }
    }

    #[test]
    fn substr_follows_sqlite() {
        for (s, a, b, want) in [
            ("hello", 2, Some(3), "ell"),
            ("hello", 0, Some(2), "h"),
            ("hello", -3, None, "llo"),
            ("hello", -3, Some(2), "ll"),
            ("hello", 3, Some(-2), "he"),
            ("hello", 10, Some(2), ""),
            ("hello", 1, None, "hello"),
        ] {
            assert_eq!(substr(s, a, b), want, "substr({s}, {a}, {b:?})");
        }
    }

    #[test]
    fn casts_read_numeric_prefixes() {
        assert_eq!(
            cast(&Value::Text("12abc".into()), CastType::Integer).unwrap(),
            Value::Int(12)
        );
        assert_eq!(
            cast(&Value::Text("abc".into()), CastType::Integer).unwrap(),
            Value::Int(0)
        );
        assert_eq!(
            cast(&Value::Text(" 2.5x".into()), CastType::Real).unwrap(),
            Value::Float(2.5)
        );
        assert_eq!(
            cast(&Value::Float(-2.7), CastType::Integer).unwrap(),
            Value::Int(-2)
        );
        assert_eq!(
            cast(&Value::Int(3), CastType::Text).unwrap(),
            Value::Text("3".into())
        );
    }
}
