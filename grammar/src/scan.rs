//! A small hand-written scanner over LQL text that knows strings and comments.
//!
//! It serves three jobs the pest grammar does poorly: lexical errors with exact spans
//! (unterminated string → the opening quote, bad escape → the escape, parentheses
//! nested too deep), the REPL's "is this input complete?" test, and splitting a
//! script into statement ranges without parsing it.

use crate::ast::Span;
use crate::error::SyntaxError;

/// Deepest parenthesis nesting accepted (guards the recursive-descent parser's stack).
pub const MAX_PAREN_DEPTH: usize = 64;

/// Walks the source; calls `on_semicolon(pos)` for each `;` outside strings/comments.
/// Returns the first lexical error, if any, and whether the text ends inside a string.
struct Scan {
    /// Byte offsets of top-level `;`.
    semis: Vec<usize>,
    /// End of the last significant (non-space, non-comment) character.
    last_significant: Option<(usize, char)>,
    error: Option<SyntaxError>,
    in_string: bool,
}

fn scan(src: &str) -> Scan {
    let bytes = src.as_bytes();
    let mut out = Scan {
        semis: Vec::new(),
        last_significant: None,
        error: None,
        in_string: false,
    };
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let open = i;
                match src[i + 2..].find("*/") {
                    Some(end) => i += 2 + end + 2,
                    None => {
                        out.in_string = true;
                        if out.error.is_none() {
                            out.error = Some(
                                SyntaxError::new("unterminated comment", Span::new(open, open + 2))
                                    .with_label(
                                        Span::new(open, open + 2),
                                        "this comment is never closed",
                                    )
                                    .with_help("close the comment with */"),
                            );
                        }
                        out.last_significant = Some((bytes.len(), '/'));
                        return out;
                    }
                }
                continue;
            }
            b'"' | b'\'' => {
                let open = i;
                i += 1;
                let mut closed = false;
                while i < bytes.len() {
                    match bytes[i] {
                        // A doubled quote stands for itself (`'it''s'`).
                        c if c == b && bytes.get(i + 1) == Some(&b) => i += 2,
                        c if c == b => {
                            closed = true;
                            i += 1;
                            break;
                        }
                        b'\\' => {
                            if out.error.is_none() {
                                if let Err(e) = check_escape(src, i) {
                                    out.error = Some(e);
                                }
                            }
                            i += 2;
                        }
                        _ => i += 1,
                    }
                }
                if !closed {
                    out.in_string = true;
                    if out.error.is_none() {
                        out.error = Some(
                            SyntaxError::new("unterminated string", Span::new(open, open + 1))
                                .with_label(Span::new(open, open + 1), "this quote is never closed")
                                .with_help(format!(
                                    "close the string with {}",
                                    if b == b'"' { "\"" } else { "'" }
                                )),
                        );
                    }
                    out.last_significant = Some((bytes.len(), b as char));
                    return out;
                }
                out.last_significant = Some((i, b as char));
                continue;
            }
            b'(' => {
                depth += 1;
                if depth > MAX_PAREN_DEPTH && out.error.is_none() {
                    out.error = Some(SyntaxError::new(
                        format!("parentheses nested too deeply (more than {MAX_PAREN_DEPTH})"),
                        Span::new(i, i + 1),
                    ));
                }
            }
            b')' => depth = depth.saturating_sub(1),
            b';' => out.semis.push(i),
            _ => {}
        }
        if !b.is_ascii_whitespace() {
            out.last_significant = Some((i + 1, b as char));
        }
        i += 1;
    }
    out
}

/// Checks the escape starting at the backslash at byte `at`.
fn check_escape(src: &str, at: usize) -> Result<(), SyntaxError> {
    let rest = &src[at + 1..];
    let Some(c) = rest.chars().next() else {
        return Ok(()); // the unterminated-string error reports this
    };
    match c {
        '\\' | '\'' | '"' | 'n' | 't' | 'r' | '0' => Ok(()),
        'u' => match parse_unicode_escape(rest) {
            Ok(_) => Ok(()),
            Err(len) => Err(bad_escape(at, 1 + len)),
        },
        c => Err(bad_escape(at, 1 + c.len_utf8())),
    }
}

fn bad_escape(at: usize, len: usize) -> SyntaxError {
    SyntaxError::new("invalid escape in string", Span::new(at, at + len))
        .with_label(Span::new(at, at + len), "unknown escape sequence")
        .with_help("valid escapes are \\\\ \\' \\\" \\n \\t \\r \\0 and \\u{XXXX}")
}

/// Parses `u{XXXX}` (the text after a backslash). Ok((char, length consumed));
/// Err(length of the bad part) otherwise.
pub(crate) fn parse_unicode_escape(rest: &str) -> Result<(char, usize), usize> {
    let b = rest.as_bytes();
    if b.get(1) != Some(&b'{') {
        return Err(1);
    }
    let mut j = 2;
    while j < b.len() && b[j].is_ascii_hexdigit() && j < 10 {
        j += 1;
    }
    if b.get(j) != Some(&b'}') || j == 2 || j > 8 {
        return Err(j.min(b.len()).max(1));
    }
    let code = u32::from_str_radix(&rest[2..j], 16).map_err(|_| j + 1)?;
    let ch = char::from_u32(code).ok_or(j + 1)?;
    Ok((ch, j + 1))
}

/// Lexical checks run before parsing: unterminated strings, bad escapes, nesting depth.
pub(crate) fn precheck(src: &str) -> Result<(), SyntaxError> {
    match scan(src).error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// True when `src` holds at least one statement and its last significant character
/// (outside strings and `--` comments) is `;` — the REPL submits then.
pub fn is_complete(src: &str) -> bool {
    let s = scan(src);
    !s.in_string && matches!(s.last_significant, Some((_, ';')))
}

/// Splits a script into statement spans at top-level `;` (strings and comments are
/// respected). Each span excludes the `;` and surrounding whitespace; empty
/// statements are skipped. Useful to echo or run a script piecewise.
pub fn split_statements(src: &str) -> Vec<Span> {
    let s = scan(src);
    let mut out = Vec::new();
    let mut start = 0;
    let ends = s.semis.iter().copied().chain(std::iter::once(src.len()));
    for end in ends {
        if let Some(span) = trim_span(src, start, end) {
            out.push(span);
        }
        start = end + 1;
    }
    out
}

/// Trims whitespace and comment-only lines around `start..end`; None when nothing is left.
fn trim_span(src: &str, start: usize, end: usize) -> Option<Span> {
    let piece = src.get(start..end)?;
    // Skip leading whitespace and comments.
    let mut off = 0;
    let b = piece.as_bytes();
    loop {
        while off < b.len() && b[off].is_ascii_whitespace() {
            off += 1;
        }
        if piece[off..].starts_with("--") {
            while off < b.len() && b[off] != b'\n' {
                off += 1;
            }
        } else {
            break;
        }
    }
    let trimmed = piece[off..].trim_end();
    if trimmed.is_empty() {
        return None;
    }
    Some(Span::new(start + off, start + off + trimmed.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completeness() {
        assert!(is_complete("WALK 'x';"));
        assert!(is_complete("WALK 'x'; -- trailing comment"));
        assert!(!is_complete("WALK 'x;'"));
        assert!(!is_complete("WALK 'x' -- ;"));
        assert!(!is_complete("WALK \"a\\\";"));
        assert!(!is_complete(""));
        assert!(!is_complete("   "));
        assert!(is_complete(";"));
    }

    #[test]
    fn splitting() {
        let src = "STATS; -- c\nWALK 'a;b' TOP 3;\n;SHOW MODELS";
        let spans = split_statements(src);
        let texts: Vec<&str> = spans.iter().map(|s| &src[s.range()]).collect();
        assert_eq!(texts, vec!["STATS", "WALK 'a;b' TOP 3", "SHOW MODELS"]);
    }
}
