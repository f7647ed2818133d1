//! SELECT over relations: joins, statements in FROM (in parentheses and as table
//! functions), subqueries, CASE, CAST, scalar functions, `||`, OFFSET and SELECT without
//! FROM parse, print and parse back to the same tree.

use lql_grammar::{parse_statement, ExprKind, FromItem, JoinKind, SelectList, StatementKind};

fn round_trip(src: &str) -> lql_grammar::Statement {
    let s = parse_statement(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    let printed = s.to_string();
    let again = parse_statement(&printed).unwrap_or_else(|e| panic!("{printed}: {e:?}"));
    assert!(s.eq_ignoring_spans(&again), "{src}\n → {printed}");
    s
}

#[test]
fn relations_parse_and_print_back() {
    for q in [
        "SELECT 1",
        "SELECT 1 + 2 AS three, 'a' || 'b'",
        "SELECT * FROM features f WHERE f.layer = 3",
        "SELECT a.layer, b.name FROM features AS a JOIN layers b ON a.layer = b.layer",
        "SELECT * FROM features JOIN layers USING (layer) LIMIT 5 OFFSET 2",
        "SELECT * FROM features LEFT JOIN layers USING (layer)",
        "SELECT * FROM features LEFT OUTER JOIN layers ON features.layer = layers.layer",
        "SELECT * FROM layers, tokens LIMIT 3",
        "SELECT * FROM layers CROSS JOIN tokens LIMIT 3",
        "SELECT layer FROM (SELECT layer, count(*) AS n FROM features GROUP BY layer) t WHERE n > 1",
        "SELECT * FROM (TRACE 'The capital of France is' FOR ' Paris') AS t",
        "SELECT layer FROM TRACE('The capital of France is', FOR => ' Paris') WHERE layer > 3",
        "SELECT * FROM WALK('Paris', TOP => 5, LAYERS => '20-22')",
        "SELECT * FROM TRACE('x', DECOMPOSE => true, POSITIONS => 'all')",
        "SELECT CASE WHEN layer < 10 THEN 'early' ELSE 'late' END FROM layers",
        "SELECT CASE layer WHEN 1 THEN 'one' WHEN 2 THEN 'two' END FROM layers",
        "SELECT CAST(layer AS TEXT), round(1.25, 1), abs(-2), lower('A'), upper(name) FROM layers",
        "SELECT substr('hello', 2, 3), coalesce(NULL, 1), ifnull(NULL, 2), nullif(1, 1), min(1, 2), max(3, 4, 5)",
        "SELECT * FROM layers WHERE layer IN (SELECT layer FROM features WHERE feature = 1)",
        "SELECT * FROM layers WHERE layer NOT IN (SELECT layer FROM layers WHERE layer > 3)",
        "SELECT (SELECT max(layer) FROM layers) AS top",
        "SELECT -layer || 'x' FROM layers",
    ] {
        round_trip(q);
    }
}

#[test]
fn table_functions_are_statements() {
    let s = round_trip("SELECT layer FROM TRACE('The capital of France is', FOR => ' Paris') t");
    let StatementKind::Select(sel) = s.kind else {
        panic!()
    };
    let Some(FromItem::Statement {
        statement, alias, ..
    }) = sel.from
    else {
        panic!()
    };
    assert_eq!(alias.unwrap().name, "t");
    let StatementKind::Trace(t) = statement.kind else {
        panic!()
    };
    assert_eq!(t.target.unwrap().value, " Paris");
    let s = round_trip("SELECT * FROM features JOIN layers USING (layer), tokens");
    let StatementKind::Select(sel) = s.kind else {
        panic!()
    };
    let Some(FromItem::Join { kind, left, .. }) = sel.from else {
        panic!()
    };
    assert_eq!(kind, JoinKind::Cross);
    assert!(matches!(
        *left,
        FromItem::Join {
            kind: JoinKind::Inner,
            ..
        }
    ));
    let s = round_trip("SELECT round(x), min(x) FROM layers");
    let StatementKind::Select(sel) = s.kind else {
        panic!()
    };
    let SelectList::Items(items) = sel.columns.value else {
        panic!()
    };
    assert!(matches!(items[0].expr.kind, ExprKind::Call { .. }));
    assert!(matches!(items[1].expr.kind, ExprKind::Aggregate { .. }));
}

#[test]
fn mistakes_are_syntax_errors() {
    for (q, want) in [
        ("SELECT * FROM layers JOIN tokens", "JOIN needs ON"),
        (
            "SELECT * FROM layers CROSS JOIN tokens ON 1 = 1",
            "CROSS JOIN takes no ON",
        ),
        ("SELECT roundd(1)", "unknown function"),
        ("SELECT substr('a')", "substr() takes 2 to 3 arguments"),
        ("SELECT CAST(1 AS blob)", "unknown type"),
        ("SELECT * FROM TRACE('x', NOPE => 1)", "TRACE(…) as a table"),
        (
            "SELECT * FROM WALK('x', LAYERS => '1; DROP')",
            "LAYERS => needs a word",
        ),
    ] {
        let e = parse_statement(q).expect_err(q);
        assert!(e.message.contains(want), "{q}: {}", e.message);
    }
}
