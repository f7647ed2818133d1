//! The Aggregate operator: groups rows by their GROUP BY keys and computes `count`, `sum`,
//! `avg`, `min` and `max` per group, with SQL's rules:
//!
//! - NULL arguments are skipped; `count(*)` counts rows, `count(x)` non-NULL values;
//! - `sum` of integers is an integer (an overflow is an error, as in SQLite), of floats a
//!   float; `sum`/`avg`/`min`/`max` of no values is NULL;
//! - without GROUP BY there is exactly one output row, even over no input rows;
//! - `DISTINCT` inside a call counts or sums each distinct value once.
//!
//! Groups come out ordered by their keys (NULL first), as SQLite's grouping sort leaves them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use lql_grammar::{AggFunc, Expr};
use lql_planner::AggCall;

use super::rowexec::{eval, sort_cmp};
use crate::error::{Error, Result};
use crate::rows::Column;
use crate::value::Value;

/// A hashable identity of a row's values (type-tagged, so `1` and `1.0` and `'1'` differ).
pub(crate) fn row_key(r: &[Value]) -> String {
    format!("{r:?}")
}

/// One call's running state.
#[derive(Debug, Clone)]
enum Acc {
    Count(i64),
    SumInt(Option<i64>),
    SumFloat(Option<f64>),
    Avg { sum: f64, n: u64 },
    Extreme(Option<Value>),
}

struct State {
    acc: Acc,
    seen: Option<HashSet<String>>,
}

impl State {
    fn new(c: &AggCall) -> State {
        let acc = match c.func {
            AggFunc::Count => Acc::Count(0),
            AggFunc::Sum => Acc::SumInt(None),
            AggFunc::Avg => Acc::Avg { sum: 0.0, n: 0 },
            AggFunc::Min | AggFunc::Max => Acc::Extreme(None),
        };
        State {
            acc,
            seen: c.distinct.then(HashSet::new),
        }
    }

    fn add(&mut self, func: AggFunc, v: Option<Value>) -> Result<()> {
        let v = match v {
            None => {
                // count(*): every row counts.
                if let Acc::Count(n) = &mut self.acc {
                    *n += 1;
                }
                return Ok(());
            }
            Some(Value::Null) => return Ok(()),
            Some(v) => v,
        };
        if let Some(seen) = &mut self.seen {
            if !seen.insert(row_key(std::slice::from_ref(&v))) {
                return Ok(());
            }
        }
        match &mut self.acc {
            Acc::Count(n) => *n += 1,
            Acc::SumInt(s) => match (&v, *s) {
                (Value::Int(i), cur) => {
                    let next = cur
                        .unwrap_or(0)
                        .checked_add(*i)
                        .ok_or_else(|| Error::semantic("integer overflow in sum()".to_string()))?;
                    *s = Some(next);
                }
                (other, cur) => {
                    let x = other.as_f64().unwrap_or(0.0);
                    self.acc = Acc::SumFloat(Some(cur.unwrap_or(0) as f64 + x));
                }
            },
            Acc::SumFloat(s) => *s = Some(s.unwrap_or(0.0) + v.as_f64().unwrap_or(0.0)),
            Acc::Avg { sum, n } => {
                *sum += v.as_f64().unwrap_or(0.0);
                *n += 1;
            }
            Acc::Extreme(cur) => {
                let replace = match cur {
                    None => true,
                    Some(c) => {
                        let o = sort_cmp(&v, c);
                        if func == AggFunc::Min {
                            o.is_lt()
                        } else {
                            o.is_gt()
                        }
                    }
                };
                if replace {
                    *cur = Some(v);
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Value {
        match self.acc {
            Acc::Count(n) => Value::Int(n),
            Acc::SumInt(s) => s.map_or(Value::Null, Value::Int),
            Acc::SumFloat(s) => s.map_or(Value::Null, Value::Float),
            Acc::Avg { n: 0, .. } => Value::Null,
            Acc::Avg { sum, n } => Value::Float(sum / n as f64),
            Acc::Extreme(v) => v.unwrap_or(Value::Null),
        }
    }
}

/// Groups `rows` (over `cols`) by `keys` and computes `calls`: each output row is the key
/// values then one value per call.
pub(crate) fn run(
    cols: &[Column],
    rows: Vec<Vec<Value>>,
    keys: &[Expr],
    calls: &[AggCall],
    cancel: &AtomicBool,
) -> Result<Vec<Vec<Value>>> {
    let mut groups: Vec<(Vec<Value>, Vec<State>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    if keys.is_empty() {
        groups.push((Vec::new(), calls.iter().map(State::new).collect()));
        index.insert(row_key(&[]), 0);
    }
    for r in rows {
        if cancel.load(AtomicOrdering::Relaxed) {
            return Err(Error::interrupted());
        }
        let k = keys
            .iter()
            .map(|e| eval(e, cols, &r))
            .collect::<Result<Vec<_>>>()?;
        let id = row_key(&k);
        let g = match index.get(&id) {
            Some(&g) => g,
            None => {
                groups.push((k, calls.iter().map(State::new).collect()));
                index.insert(id, groups.len() - 1);
                groups.len() - 1
            }
        };
        for (c, st) in calls.iter().zip(groups[g].1.iter_mut()) {
            let v = c.arg.as_ref().map(|a| eval(a, cols, &r)).transpose()?;
            st.add(c.func, v)?;
        }
    }
    groups.sort_by(|(a, _), (b, _)| {
        a.iter()
            .zip(b)
            .map(|(x, y)| sort_cmp(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    Ok(groups
        .into_iter()
        .map(|(mut k, states)| {
            k.extend(states.into_iter().map(State::finish));
            k
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;
    use lql_grammar::{ExprKind, Ident, Span};

    fn col(n: &str) -> Expr {
        Expr {
            kind: ExprKind::Column(Ident {
                name: n.into(),
                span: Span::default(),
            }),
            span: Span::default(),
        }
    }
    fn call(func: AggFunc, arg: Option<&str>, distinct: bool) -> AggCall {
        AggCall {
            func,
            arg: arg.map(col),
            distinct,
        }
    }

    #[test]
    fn sql_rules_for_nulls_empty_input_and_distinct() {
        let cols = vec![
            Column::new("g", ValueType::Int),
            Column::new("x", ValueType::Any),
        ];
        let rows = vec![
            vec![Value::Int(2), Value::Int(5)],
            vec![Value::Int(1), Value::Null],
            vec![Value::Int(1), Value::Int(3)],
            vec![Value::Int(1), Value::Int(3)],
            vec![Value::Int(2), Value::Float(0.5)],
        ];
        let calls = [
            call(AggFunc::Count, None, false),
            call(AggFunc::Count, Some("x"), false),
            call(AggFunc::Count, Some("x"), true),
            call(AggFunc::Sum, Some("x"), false),
            call(AggFunc::Avg, Some("x"), false),
            call(AggFunc::Min, Some("x"), false),
            call(AggFunc::Max, Some("x"), false),
        ];
        let stop = AtomicBool::new(false);
        let out = run(&cols, rows.clone(), &[col("g")], &calls, &stop).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            vec![
                Value::Int(1),
                Value::Int(3),
                Value::Int(2),
                Value::Int(1),
                Value::Int(6),
                Value::Float(3.0),
                Value::Int(3),
                Value::Int(3)
            ]
        );
        assert_eq!(out[1][4], Value::Float(5.5), "int + float sums as a float");
        // No GROUP BY over no rows: one row, count 0 and NULLs.
        let empty = run(&cols, vec![], &[], &calls, &stop).unwrap();
        assert_eq!(empty.len(), 1);
        assert_eq!(empty[0][0], Value::Int(0));
        assert_eq!(empty[0][3], Value::Null);
        // With GROUP BY over no rows: no rows.
        assert!(run(&cols, vec![], &[col("g")], &calls, &stop)
            .unwrap()
            .is_empty());
    }
}
