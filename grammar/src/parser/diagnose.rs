//! pest error → [`SyntaxError`]: the furthest failure position, the token found there,
//! the expected items in words, and "did you mean" suggestions by edit distance.

use super::Rule;
use crate::ast::Span;
use crate::error::{suggest, SyntaxError};
use crate::keywords::{KEYWORDS, STATEMENT_KEYWORDS};

/// The token found at `pos`, with a description: a word, a number, a string, a symbol.
fn token_at(src: &str, pos: usize) -> (Span, String) {
    let Some(rest) = src.get(pos..) else {
        return (Span::new(src.len(), src.len()), "end of input".into());
    };
    let Some(c) = rest.chars().next() else {
        return (Span::new(pos, pos), "end of input".into());
    };
    let word_len = |pred: &dyn Fn(char) -> bool| -> usize {
        rest.char_indices()
            .find(|(_, ch)| !pred(*ch))
            .map(|(i, _)| i)
            .unwrap_or(rest.len())
    };
    if c.is_alphabetic() || c == '_' {
        let n = word_len(&|ch: char| ch.is_alphanumeric() || ch == '_');
        let w = &rest[..n];
        (Span::new(pos, pos + n), format!("`{w}`"))
    } else if c.is_ascii_digit() {
        let n = word_len(&|ch: char| ch.is_ascii_alphanumeric() || ch == '.' || ch == '_');
        (Span::new(pos, pos + n), format!("`{}`", &rest[..n]))
    } else if c == '"' || c == '\'' {
        let mut end = rest.len();
        let mut esc = false;
        for (i, ch) in rest.char_indices().skip(1) {
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == c {
                end = i + 1;
                break;
            }
        }
        (Span::new(pos, pos + end), "a string".into())
    } else {
        (Span::new(pos, pos + c.len_utf8()), format!("`{c}`"))
    }
}

fn keyword_of(rule: Rule) -> Option<String> {
    let name = format!("{rule:?}");
    name.strip_prefix("kw_").map(|k| k.to_ascii_uppercase())
}

fn describe_rule(rule: Rule) -> String {
    if let Some(k) = keyword_of(rule) {
        return k;
    }
    match rule {
        Rule::string | Rule::dq_string | Rule::sq_string => "a string",
        Rule::number => "a number",
        Rule::integer => "an integer",
        Rule::unsigned => "a layer number",
        Rule::ident => "a column name",
        Rule::word => "a name",
        Rule::table_name => "a table name",
        Rule::semi => "`;`",
        Rule::comma => "`,`",
        Rule::lparen => "`(`",
        Rule::rparen => "`)`",
        Rule::dash => "`-`",
        Rule::eq => "`=`",
        Rule::star => "`*`",
        Rule::cmp_op => "a comparison operator",
        Rule::EOI => "end of input",
        Rule::script | Rule::statement | Rule::explainable => "a statement",
        Rule::literal => "a value",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::not_expr
        | Rule::predicate
        | Rule::operand
        | Rule::sum_expr
        | Rule::product
        | Rule::unary
        | Rule::call
        | Rule::select_item => "an expression",
        Rule::group_clause => "GROUP",
        Rule::having_clause => "HAVING",
        Rule::distinct => "DISTINCT",
        Rule::add_op | Rule::mul_op | Rule::neg => "an arithmetic operator",
        Rule::layer_range => "a layer range",
        Rule::use_model => "MODEL",
        Rule::profile_clause => "PROFILE",
        Rule::backend_clause => "BACKEND",
        Rule::set_stmt => "SET",
        Rule::generate_clause => "GENERATE",
        Rule::max_clause => "MAX",
        Rule::temperature_clause => "TEMPERATURE",
        Rule::top_k_clause => "TOP_K",
        Rule::top_p_clause => "TOP_P",
        Rule::seed_clause => "SEED",
        Rule::repeat_penalty_clause => "REPEAT_PENALTY",
        Rule::frequency_penalty_clause => "FREQUENCY_PENALTY",
        Rule::presence_penalty_clause => "PRESENCE_PENALTY",
        Rule::stop_clause => "STOP",
        Rule::top_clause => "TOP",
        Rule::layers_clause => "LAYERS",
        Rule::at_layer_clause => "AT",
        Rule::mode_clause => "MODE",
        Rule::detail_clause => "BRIEF, VERBOSE, RAW",
        Rule::where_clause => "WHERE",
        Rule::order_clause => "ORDER",
        Rule::limit_clause => "LIMIT",
        Rule::diff_layer_clause => "LAYER",
        Rule::physical_clause => "PHYSICAL",
        Rule::for_clause => "FOR",
        Rule::decompose_clause => "DECOMPOSE",
        Rule::positions_clause => "POSITIONS",
        Rule::save_clause => "SAVE",
        Rule::alpha_clause => "ALPHA",
        Rule::confidence_clause => "CONFIDENCE",
        Rule::sequential_clause => "SEQUENTIAL",
        Rule::per_fact_clause => "PER",
        Rule::into_patch_clause | Rule::into_clause => "INTO",
        Rule::format_clause => "FORMAT",
        Rule::shape_clause => "SHAPE",
        Rule::group_width_clause => "GROUP",
        Rule::encoding_clause => "ENCODING",
        Rule::like_clause | Rule::like_tail => "LIKE",
        Rule::column_list | Rule::value_row => "`(`",
        Rule::assignment => "a column name",
        Rule::order_item => "a column name or expression",
        Rule::select_list => "`*` or a column name",
        Rule::diff_operand => "CURRENT, a string",
        Rule::cmp_tail => "a comparison operator",
        Rule::in_tail => "IN",
        Rule::between_tail => "BETWEEN",
        Rule::is_null_tail => "IS",
        _ => return format!("{rule:?}").replace('_', " "),
    }
    .to_string()
}

fn join_words(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} or {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

pub(super) fn convert_error(e: pest::error::Error<Rule>, src: &str) -> SyntaxError {
    use pest::error::{ErrorVariant, InputLocation};
    let pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    let (tok_span, found) = token_at(src, pos);
    let positives = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => positives.clone(),
        ErrorVariant::CustomError { message } => {
            return SyntaxError::new(message.clone(), tok_span);
        }
    };

    let expected_keywords: Vec<String> = positives
        .iter()
        .flat_map(|r| {
            describe_rule(*r)
                .split(", ")
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|w| KEYWORDS.contains(&w.as_str()))
        .collect();
    let statement_start = positives
        .iter()
        .any(|r| matches!(r, Rule::script | Rule::statement | Rule::explainable));
    let found_word = src
        .get(tok_span.range())
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        })
        .map(str::to_string);

    // Unknown statement keyword: "unknown keyword WALKK; did you mean WALK?"
    if statement_start {
        if let Some(w) = found_word
            .as_ref()
            .filter(|w| !KEYWORDS.contains(&w.to_ascii_uppercase().as_str()))
        {
            let mut err = SyntaxError::new(format!("unknown keyword {w}"), tok_span)
                .with_label(tok_span, "a statement cannot start with this word");
            let sugg = suggest(w, STATEMENT_KEYWORDS.iter().copied());
            err.help = Some(match sugg {
                Some(s) => {
                    err.message = format!("unknown keyword {w}; did you mean {s}?");
                    format!("did you mean {s}?")
                }
                None => format!(
                    "statements start with one of {}",
                    STATEMENT_KEYWORDS.join(", ")
                ),
            });
            return err;
        }
        let msg = format!("expected a statement, found {found}");
        return SyntaxError::new(msg, tok_span)
            .with_label(tok_span, "expected a statement here")
            .with_help(format!(
                "statements start with one of {}",
                STATEMENT_KEYWORDS.join(", ")
            ));
    }

    let mut words: Vec<String> = Vec::new();
    for r in &positives {
        for d in describe_rule(*r).split(", ") {
            if !words.iter().any(|w| w == d) {
                words.push(d.to_string());
            }
        }
    }
    // Keywords come first, then other tokens, then end of input.
    words.sort_by_key(|w| {
        if w == "end of input" {
            2
        } else if w.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            0
        } else {
            1
        }
    });
    // Collapse the many ways an expression can start into one phrase.
    if words.iter().any(|w| w == "a column name") && words.iter().any(|w| w == "a number") {
        let starts = [
            "NOT",
            "a string",
            "a number",
            "TRUE",
            "FALSE",
            "NULL",
            "a column name",
            "`(`",
        ];
        words.retain(|w| !starts.contains(&w.as_str()));
        words.insert(0, "an expression".into());
    }
    let expected = join_words(&words);
    let message = if expected.is_empty() {
        format!("unexpected {found}")
    } else {
        format!("expected {expected}, found {found}")
    };
    let mut err =
        SyntaxError::new(message, tok_span).with_label(tok_span, format!("expected {expected}"));
    if let Some(w) = &found_word {
        if let Some(s) = suggest(w, expected_keywords.iter().map(String::as_str)) {
            err.help = Some(format!("did you mean {s}?"));
        }
    }
    // `DESCRIBE features`: a table named where DESCRIBE wants TABLE or a quoted entity.
    if err.help.is_none() && words.iter().any(|w| w == "TABLE") {
        if let Some(w) = &found_word {
            if crate::ast::Table::ALL
                .iter()
                .any(|t| t.name().eq_ignore_ascii_case(w))
            {
                err.help = Some(format!(
                    "did you mean DESCRIBE TABLE {w}? (its columns; DESCRIBE \"{w}\" describes the word)"
                ));
            } else if words.iter().any(|x| x == "a string") {
                err.help = Some(format!("quote the entity: DESCRIBE \"{w}\""));
            }
        }
    }
    if err.help.is_none() && found == "end of input" && words.iter().any(|w| w != "`;`") {
        err.help = Some("the statement is incomplete".into());
    }
    let starts_statement = found_word
        .as_ref()
        .is_some_and(|w| STATEMENT_KEYWORDS.contains(&w.to_ascii_uppercase().as_str()));
    if err.help.is_none() && starts_statement && words.iter().any(|w| w == "`;`") {
        err.help = Some("end the previous statement with `;` before starting another".into());
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_of_a_table_name_suggests_describe_table() {
        let e = crate::parse("DESCRIBE features").unwrap_err();
        assert!(
            e.help
                .as_deref()
                .is_some_and(|h| h.contains("DESCRIBE TABLE features")),
            "{e:?}"
        );
        let e = crate::parse("DESCRIBE France").unwrap_err();
        assert!(
            e.help
                .as_deref()
                .is_some_and(|h| h.contains("DESCRIBE \"France\"")),
            "{e:?}"
        );
    }

    #[test]
    fn keyword_rules_are_listed() {
        // Every keyword rule of the grammar appears in KEYWORDS (tab completion).
        for r in Rule::all_rules() {
            if let Some(k) = keyword_of(*r) {
                assert!(KEYWORDS.contains(&k.as_str()), "KEYWORDS lacks {k}");
            }
        }
    }
}
