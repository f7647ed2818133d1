//! GBNF, llama.cpp's grammar format, read into rules and written out as the Lark dialect
//! llguidance compiles (docs/serve.md "Constrained decoding" says why this route).
//!
//! The reader follows llama.cpp's `grammar-parser`: `name ::= alternatives`, `#` comments,
//! string literals and character classes with `\x` `\u` `\U` `\t` `\r` `\n` `\\` `\"` `\[`
//! `\]` escapes, `.` for any character, groups, and the repetitions `*` `+` `?` `{m}`
//! `{m,}` `{m,n}`; a new line ends a rule except inside parentheses or after `|` or `::=`.
//! Token references (`<…>`) are refused as not supported yet. The writer keeps the grammar
//! character for character: every rule stays a rule (so greedy lexing never changes the
//! language), literals become JSON strings and classes one-character regexes, and rule
//! names are made lower case and unique as Lark requires, with `root` as `start`.

use std::collections::HashMap;
use std::fmt::Write as _;

/// A GBNF grammar that does not read, with the line and column of the fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GbnfError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for GbnfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// Most rules, and most nesting of groups, a grammar may have (llama.cpp has no cap; these
/// keep a hostile grammar from exhausting memory or the stack).
const MAX_RULES: usize = 10_000;
const MAX_DEPTH: usize = 64;
/// Largest count in `{m,n}`.
const MAX_REPEAT: u32 = 10_000;

#[derive(Debug, Clone, PartialEq)]
enum Atom {
    Literal(String),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Any,
    Rule(String),
    Group(Vec<Vec<Item>>),
}

#[derive(Debug, Clone, PartialEq)]
struct Item {
    atom: Atom,
    /// `(min, max)`; `None` max is unbounded. `(1, Some(1))` is no repetition.
    repeat: (u32, Option<u32>),
}

/// A GBNF grammar as rules, in the order they were first defined.
#[derive(Debug, Clone, PartialEq)]
pub struct Gbnf {
    rules: Vec<(String, Vec<Vec<Item>>)>,
}

impl Gbnf {
    /// Read GBNF text. Every rule referred to must be defined and `root` must exist.
    pub fn parse(text: &str) -> Result<Gbnf, GbnfError> {
        let mut p = Reader {
            src: text,
            pos: 0,
            depth: 0,
        };
        let mut rules: Vec<(String, Vec<Vec<Item>>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        p.space(true);
        while !p.at_end() {
            let at = p.pos;
            let name = p.name()?;
            p.space(false);
            if !p.eat("::=") {
                return Err(p.error("expected ::= after the rule name"));
            }
            p.space(true);
            let alts = p.alternatives()?;
            match index.get(&name) {
                // llama.cpp lets a later definition add alternatives to an earlier one.
                Some(&i) => rules[i].1.extend(alts),
                None => {
                    if rules.len() >= MAX_RULES {
                        return Err(p.error_at(at, format!("more than {MAX_RULES} rules")));
                    }
                    index.insert(name.clone(), rules.len());
                    rules.push((name, alts));
                }
            }
            if !p.at_end() && !p.eat_newline() {
                return Err(p.error("expected the end of the rule (a new line)"));
            }
            p.space(true);
        }
        let g = Gbnf { rules };
        if !index.contains_key("root") {
            return Err(GbnfError {
                line: 1,
                column: 1,
                message: "the grammar has no `root` rule".into(),
            });
        }
        for (_, alts) in &g.rules {
            if let Some(name) = undefined_reference(alts, &index) {
                return Err(p.undefined(&name));
            }
        }
        Ok(g)
    }

    /// The grammar in llguidance's Lark dialect (`start` is GBNF's `root`).
    pub fn to_lark(&self) -> String {
        let names = lark_names(self.rules.iter().map(|(n, _)| n.as_str()));
        let mut out = String::new();
        for (name, alts) in &self.rules {
            let _ = writeln!(out, "{}: {}", names[name], alternatives(alts, &names));
        }
        out
    }
}

/// The first name used in `alts` that no rule defines.
fn undefined_reference(alts: &[Vec<Item>], index: &HashMap<String, usize>) -> Option<String> {
    for seq in alts {
        for item in seq {
            match &item.atom {
                Atom::Rule(n) if !index.contains_key(n) => return Some(n.clone()),
                Atom::Group(inner) => {
                    if let Some(n) = undefined_reference(inner, index) {
                        return Some(n);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// GBNF names → Lark rule names: lower case, `[a-z][a-z0-9_-]*`, unique, `root` → `start`.
fn lark_names<'a>(names: impl Iterator<Item = &'a str>) -> HashMap<String, String> {
    let names: Vec<&str> = names.collect();
    let mut taken: std::collections::HashSet<String> = ["start".to_string()].into();
    let mut out = HashMap::new();
    for n in &names {
        if *n == "root" {
            out.insert(n.to_string(), "start".to_string());
            continue;
        }
        let mut base: String = n
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9' | '-') => c,
                _ => '_',
            })
            .collect();
        if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
            base.insert(0, 'r');
        }
        let mut candidate = base.clone();
        let mut k = 2;
        while taken.contains(&candidate) {
            candidate = format!("{base}-{k}");
            k += 1;
        }
        taken.insert(candidate.clone());
        out.insert(n.to_string(), candidate);
    }
    out
}

fn alternatives(alts: &[Vec<Item>], names: &HashMap<String, String>) -> String {
    alts.iter()
        .map(|seq| {
            seq.iter()
                .filter_map(|item| item_lark(item, names))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One item in Lark, or `None` for an item that matches only the empty string.
fn item_lark(item: &Item, names: &HashMap<String, String>) -> Option<String> {
    let atom = match &item.atom {
        Atom::Literal(s) if s.is_empty() => return None,
        Atom::Literal(s) => json_string(s),
        Atom::Class { negated, ranges } => {
            let mut rx = String::from("/[");
            if *negated {
                rx.push('^');
            }
            for &(lo, hi) in ranges {
                let _ = write!(rx, "\\x{{{:X}}}", lo as u32);
                if hi != lo {
                    let _ = write!(rx, "-\\x{{{:X}}}", hi as u32);
                }
            }
            rx.push_str("]/");
            rx
        }
        Atom::Any => "/(?s:.)/".to_string(),
        Atom::Rule(n) => names[n].clone(),
        Atom::Group(alts) => format!("({})", alternatives(alts, names)),
    };
    Some(match item.repeat {
        (1, Some(1)) => atom,
        (0, None) => format!("{atom}*"),
        (1, None) => format!("{atom}+"),
        (0, Some(1)) => format!("{atom}?"),
        (m, None) => format!("{atom}{{{m},}}"),
        (m, Some(n)) if m == n => format!("{atom}{{{m}}}"),
        (m, Some(n)) => format!("{atom}{{{m},{n}}}"),
    })
}

/// A JSON string literal (the Lark dialect reads string literals as JSON); DEL is escaped
/// too, since the Lark lexer refuses it raw.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Reader<'a> {
    src: &'a str,
    pos: usize,
    depth: usize,
}

impl Reader<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn eat_newline(&mut self) -> bool {
        self.eat("\r\n") || self.eat("\n") || self.eat("\r")
    }

    /// Skip spaces, tabs and comments; new lines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        loop {
            match self.peek() {
                Some(' ' | '\t') => self.pos += 1,
                Some('#') => {
                    while !matches!(self.peek(), None | Some('\n' | '\r')) {
                        self.bump();
                    }
                }
                Some('\n' | '\r') if newlines => self.pos += 1,
                _ => return,
            }
        }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message)
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> GbnfError {
        let before = &self.src[..pos.min(self.src.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        GbnfError {
            line,
            column,
            message: message.into(),
        }
    }

    fn undefined(&self, name: &str) -> GbnfError {
        let pos = self
            .src
            .match_indices(name)
            .find(|(i, _)| {
                let before = self.src[..*i].chars().next_back();
                let after = self.src[i + name.len()..].chars().next();
                !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
            })
            .map_or(0, |(i, _)| i);
        self.error_at(pos, format!("rule `{name}` is used but never defined"))
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.bump();
        }
        if self.pos == start {
            return Err(self.error("expected a rule name"));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn alternatives(&mut self) -> Result<Vec<Vec<Item>>, GbnfError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("groups nested deeper than {MAX_DEPTH}")));
        }
        let mut alts = vec![self.sequence()?];
        while self.eat("|") {
            self.space(true);
            alts.push(self.sequence()?);
        }
        self.depth -= 1;
        Ok(alts)
    }

    fn sequence(&mut self) -> Result<Vec<Item>, GbnfError> {
        let nested = self.depth > 1;
        let mut seq: Vec<Item> = Vec::new();
        loop {
            let atom = match self.peek() {
                Some('"') => {
                    self.bump();
                    Atom::Literal(self.literal()?)
                }
                Some('[') => {
                    self.bump();
                    self.class()?
                }
                Some('.') => {
                    self.bump();
                    Atom::Any
                }
                Some('(') => {
                    self.bump();
                    self.space(true);
                    let inner = self.alternatives()?;
                    if !self.eat(")") {
                        return Err(self.error("expected `)`"));
                    }
                    Atom::Group(inner)
                }
                Some('<') | Some('!') => {
                    return Err(self.error(
                        "not supported yet: token references (`<…>`) in GBNF; write the text",
                    ))
                }
                Some(c) if is_word_char(c) => Atom::Rule(self.name()?),
                _ => break,
            };
            seq.push(Item {
                atom,
                repeat: (1, Some(1)),
            });
            self.space(nested);
            while let Some(c @ ('*' | '+' | '?' | '{')) = self.peek() {
                let Some(last) = seq.last_mut() else { break };
                let repeat = match c {
                    '*' => (0, None),
                    '+' => (1, None),
                    '?' => (0, Some(1)),
                    _ => {
                        self.bump();
                        self.braces()?
                    }
                };
                if c != '{' {
                    self.bump();
                }
                if last.repeat != (1, Some(1)) {
                    // `a**` or `a{2}?`: repeat the repetition, as llama.cpp does.
                    let inner = std::mem::replace(&mut last.atom, Atom::Group(Vec::new()));
                    last.atom = Atom::Group(vec![vec![Item {
                        atom: inner,
                        repeat: last.repeat,
                    }]]);
                }
                last.repeat = repeat;
                self.space(nested);
            }
        }
        Ok(seq)
    }

    /// `{m}`, `{m,}`, `{m,n}` or `{,n}` after the `{`.
    fn braces(&mut self) -> Result<(u32, Option<u32>), GbnfError> {
        self.space(false);
        let min = self.number()?;
        self.space(false);
        let out = if self.eat(",") {
            self.space(false);
            let max = self.number()?;
            (min.unwrap_or(0), max)
        } else {
            let Some(m) = min else {
                return Err(self.error("expected a count in `{…}`"));
            };
            (m, Some(m))
        };
        self.space(false);
        if !self.eat("}") {
            return Err(self.error("expected `}`"));
        }
        if let Some(max) = out.1 {
            if max < out.0 {
                return Err(self.error(format!(
                    "`{{{},{max}}}`: the maximum is below the minimum",
                    out.0
                )));
            }
        }
        Ok(out)
    }

    fn number(&mut self) -> Result<Option<u32>, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        if start == self.pos {
            return Ok(None);
        }
        match self.src[start..self.pos].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(Some(n)),
            _ => Err(self.error_at(start, format!("a repetition count above {MAX_REPEAT}"))),
        }
    }

    /// A string literal's characters after the opening quote, through the closing one.
    fn literal(&mut self) -> Result<String, GbnfError> {
        let mut out = String::new();
        loop {
            match self.peek() {
                None | Some('\n' | '\r') => return Err(self.error("unterminated string literal")),
                Some('"') => {
                    self.bump();
                    return Ok(out);
                }
                Some('\\') => out.push(self.escape()?),
                Some(c) => {
                    self.bump();
                    out.push(c);
                }
            }
        }
    }

    /// A character class's ranges after the `[`, through the `]`.
    fn class(&mut self) -> Result<Atom, GbnfError> {
        let negated = self.eat("^");
        let mut ranges = Vec::new();
        loop {
            let lo = match self.peek() {
                None | Some('\n' | '\r') => return Err(self.error("unterminated character class")),
                Some(']') => {
                    self.bump();
                    return Ok(Atom::Class { negated, ranges });
                }
                Some('\\') => self.escape()?,
                Some(c) => {
                    self.bump();
                    c
                }
            };
            let hi = if self.rest().starts_with('-') && !self.rest().starts_with("-]") {
                self.bump();
                match self.peek() {
                    Some('\\') => self.escape()?,
                    Some(c) if c != '\n' && c != '\r' => {
                        self.bump();
                        c
                    }
                    _ => return Err(self.error("unterminated character range")),
                }
            } else {
                lo
            };
            if hi < lo {
                return Err(self.error(format!("the range {lo:?}-{hi:?} is backwards")));
            }
            ranges.push((lo, hi));
        }
    }

    /// One escape, at the backslash.
    fn escape(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        self.bump();
        let c = self
            .bump()
            .ok_or_else(|| self.error("a backslash at the end"))?;
        let hex = |r: &mut Self, n: usize| -> Result<char, GbnfError> {
            let start = r.pos;
            for _ in 0..n {
                match r.peek() {
                    Some(h) if h.is_ascii_hexdigit() => {
                        r.bump();
                    }
                    _ => return Err(r.error_at(at, format!("`\\{c}` needs {n} hex digits"))),
                }
            }
            let v = u32::from_str_radix(&r.src[start..r.pos], 16).unwrap_or(u32::MAX);
            char::from_u32(v)
                .ok_or_else(|| r.error_at(at, format!("`\\{c}{v:X}` is not a character")))
        };
        Ok(match c {
            'x' => hex(self, 2)?,
            'u' => hex(self, 4)?,
            'U' => hex(self, 8)?,
            't' => '\t',
            'r' => '\r',
            'n' => '\n',
            '\\' | '"' | '[' | ']' | '-' | '^' => c,
            other => {
                return Err(self.error_at(at, format!("unknown escape `\\{other}`")));
            }
        })
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lark(src: &str) -> String {
        Gbnf::parse(src).unwrap().to_lark()
    }

    #[test]
    fn rules_literals_classes_and_repeats() {
        let out = lark("root ::= \"a\\\"b\" [a-z0-9_]+ ws{2,3} (x | )\nws ::= [ \\t]*\nx ::= .\n");
        assert_eq!(
            out,
            "start: \"a\\\"b\" /[\\x{61}-\\x{7A}\\x{30}-\\x{39}\\x{5F}]/+ ws{2,3} (x | )\n\
             ws: /[\\x{20}\\x{9}]/*\n\
             x: /(?s:.)/\n"
        );
    }

    #[test]
    fn names_are_made_lark_rule_names() {
        let out = lark("root ::= dataType Start data_type\ndataType ::= \"i\"\nStart ::= \"s\"\ndata_type ::= \"d\"\n");
        assert!(
            out.starts_with("start: datatype start-2 data_type\n"),
            "{out}"
        );
    }

    #[test]
    fn rules_continue_inside_groups_and_after_bars() {
        let out = lark("root ::=\n  (\n \"a\"\n  \"b\" ) |\n  \"c\"\n");
        assert_eq!(out, "start: (\"a\" \"b\") | \"c\"\n");
    }

    #[test]
    fn faults_name_line_and_column() {
        let e = Gbnf::parse("root ::= \"a\" b\n").unwrap_err();
        assert_eq!((e.line, e.column), (1, 14), "{e}");
        assert!(e.message.contains("`b`"));
        let e = Gbnf::parse("x ::= \"a\"\n").unwrap_err();
        assert!(e.message.contains("root"));
        let e = Gbnf::parse("root ::= \"a\nb\"\n").unwrap_err();
        assert!(e.message.contains("unterminated"), "{e}");
        let e = Gbnf::parse("root ::= [z-a]\n").unwrap_err();
        assert!(e.message.contains("backwards"), "{e}");
        let e = Gbnf::parse("root ::= \"a\"{5,2}\n").unwrap_err();
        assert!(e.message.contains("below"), "{e}");
        let e = Gbnf::parse("root ::= <think>\n").unwrap_err();
        assert!(e.message.contains("not supported yet"), "{e}");
        let deep = format!("root ::= {}\"a\"{}\n", "(".repeat(200), ")".repeat(200));
        assert!(Gbnf::parse(&deep).unwrap_err().message.contains("nested"));
    }
}
