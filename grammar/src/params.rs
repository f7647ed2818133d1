//! Statement parameters, as SQLite spells them: `?` (the next index), `?NNN` (index NNN,
//! 1-based) and `:name`. The scanner finds them outside strings and comments and numbers
//! them; the grammar accepts one wherever a string or a number stands (prompts, counts,
//! WHERE values), and `lql::Statement` binds each value into the parsed statement at its
//! placeholder's span.

use crate::ast::Span;
use crate::error::SyntaxError;

/// Most parameters one statement may have (`?NNN` above this is refused).
pub const MAX_PARAMS: usize = 999;

/// One placeholder in a statement's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub span: Span,
    /// 1-based index (`?` takes the next after the highest so far, as SQLite does).
    pub index: usize,
    /// `:name` (with the colon), when named.
    pub name: Option<String>,
}

/// The placeholders of `src`, in text order.
pub fn placeholders(src: &str) -> Result<Vec<Placeholder>, SyntaxError> {
    let bytes = src.as_bytes();
    let mut out: Vec<Placeholder> = Vec::new();
    let mut highest = 0usize;
    let mut named: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'?' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let span = Span::new(start, i);
                let index = if i > start + 1 {
                    let n: usize = src[start + 1..i].parse().unwrap_or(usize::MAX);
                    if n == 0 || n > MAX_PARAMS {
                        return Err(SyntaxError::new(
                            format!("parameter index must be 1-{MAX_PARAMS}"),
                            span,
                        ));
                    }
                    n
                } else {
                    highest + 1
                };
                if index > MAX_PARAMS {
                    return Err(SyntaxError::new(
                        format!("more than {MAX_PARAMS} parameters"),
                        span,
                    ));
                }
                highest = highest.max(index);
                out.push(Placeholder {
                    span,
                    index,
                    name: None,
                });
            }
            b':' if bytes
                .get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') =>
            {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let name = src[start..i].to_string();
                let index = match named.iter().find(|(n, _)| *n == name) {
                    Some((_, k)) => *k,
                    None => {
                        highest += 1;
                        named.push((name.clone(), highest));
                        highest
                    }
                };
                if index > MAX_PARAMS {
                    return Err(SyntaxError::new(
                        format!("more than {MAX_PARAMS} parameters"),
                        Span::new(start, i),
                    ));
                }
                out.push(Placeholder {
                    span: Span::new(start, i),
                    index,
                    name: Some(name),
                });
            }
            _ => i += 1,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_placeholders_outside_strings_and_comments() {
        let p = placeholders("SELECT * FROM layers WHERE layer = ? AND x = '?' -- ?\n AND y = ?3 AND z = :n AND w = :n").unwrap();
        let idx: Vec<usize> = p.iter().map(|p| p.index).collect();
        assert_eq!(idx, [1, 3, 4, 4]);
        assert_eq!(p[2].name.as_deref(), Some(":n"));
        assert!(placeholders("INFER ?0").is_err());
        assert!(placeholders("INFER ?1000").is_err());
    }
}
