//! Statements as relations, against sqlite3: the rows of TRACE, WALK, INFER, TOKENIZE and a
//! `features` subquery on the default model, and of the model tables `layers` and
//! `tensors`, are copied into sqlite tables; each query below then runs in LQL over the
//! statements themselves (as table functions in FROM) and in sqlite3 over the copies.
//! Columns (names and order) and rows must agree (floats to 1e-9 relative; a query without
//! ORDER BY compares its rows as a multiset). The queries cover joins (inner, LEFT, CROSS,
//! comma, USING, self-joins), subqueries in FROM and IN and as values, CASE, CAST, `||`,
//! the scalar functions, OFFSET, SELECT without FROM and aggregates over statements' rows.
//! sqlite3 must be installed under `CI=true` (`.ci/run` installs it).

use std::path::Path;

use lql::{Connection, Value, ValueType};
use lql_tests::{default_model_path, sqlite};

/// `{name}`: the LQL relation, and the statement whose rows fill sqlite's table `name`.
const RELATIONS: &[(&str, &str)] = &[
    (
        "trace",
        "TRACE('The capital of France is', FOR => ' Paris')",
    ),
    ("walk", "WALK('Paris', TOP => 5, LAYERS => '20-22')"),
    ("infer", "INFER('The capital of France is', TOP => 10)"),
    (
        "tok",
        "TOKENIZE('The capital of France is the capital of the French')",
    ),
    (
        "feat",
        "(SELECT layer, feature FROM features WHERE layer < 3)",
    ),
];

/// `{features}`: the model table in LQL, its copy of layers 0-2 (`feat`) in sqlite; the
/// queries that name it read only those layers.
const TABLE_COPIES: &[(&str, &str, &str)] = &[("features", "features", "feat")];

const QUERIES: &[&str] = &[
    // joins of the model's tables
    "SELECT l.layer, l.bytes, count(*) AS n FROM layers l JOIN tensors t ON t.layer = l.layer GROUP BY l.layer, l.bytes ORDER BY l.layer",
    "SELECT t.name, l.gate_encoding FROM tensors t JOIN layers l USING (layer) WHERE t.role = 'ffn_gate' ORDER BY t.name LIMIT 5",
    "SELECT t.role, count(*) AS n FROM tensors t LEFT JOIN layers l ON t.layer = l.layer WHERE l.layer IS NULL GROUP BY t.role ORDER BY t.role",
    "SELECT count(*) AS n FROM layers a CROSS JOIN layers b WHERE a.layer < b.layer",
    "SELECT count(*) AS n FROM layers a, layers b WHERE a.layer + 1 = b.layer",
    "SELECT a.layer AS a, b.layer AS b FROM layers a JOIN layers b ON b.layer = a.layer * 2 ORDER BY a.layer",
    "SELECT l.layer AS layer, sum(t.bytes) AS total FROM layers l LEFT JOIN tensors t ON t.layer = l.layer AND t.role LIKE 'attn%' GROUP BY l.layer ORDER BY total DESC, layer LIMIT 5",
    "SELECT count(*) AS n FROM tensors t1 JOIN tensors t2 ON t1.layer = t2.layer AND t1.role = 'attn_q' AND t2.role = 'attn_k'",
    "SELECT l.layer AS layer, (l.bytes - 2000000) / 1000 AS k FROM layers l WHERE l.layer BETWEEN 5 AND 8 ORDER BY layer",
    // statements joined with tables and with each other
    "SELECT x.layer AS layer, x.rank AS rank, i.token AS token FROM {trace} x JOIN {infer} i ON x.rank = i.rank ORDER BY layer",
    "SELECT t.layer AS layer, t.ffn_contrib AS f, l.bytes AS bytes FROM {trace} t JOIN layers l USING (layer) WHERE t.ffn_contrib > 1 ORDER BY f DESC",
    "SELECT w.layer AS layer, w.feature AS feature, l.bytes AS bytes FROM {walk} w JOIN layers l ON l.layer = w.layer ORDER BY w.gate DESC LIMIT 4",
    "SELECT t.layer AS layer, t.ffn_contrib - t.attn_contrib AS d FROM {trace} t LEFT JOIN {walk} w ON w.layer = t.layer WHERE w.layer IS NULL AND t.layer IS NOT NULL ORDER BY layer LIMIT 5",
    "SELECT a.position AS p, b.position AS q FROM {tok} a JOIN {tok} b ON a.token_id = b.token_id AND a.position < b.position ORDER BY p, q",
    "SELECT r.layer AS layer, r.n AS n FROM (SELECT layer, count(*) AS n FROM {walk} GROUP BY layer) r JOIN layers l USING (layer) ORDER BY layer",
    "SELECT f.layer AS layer, count(*) AS n FROM {feat} f JOIN layers l USING (layer) GROUP BY f.layer ORDER BY layer",
    "SELECT count(*) AS n FROM {tok} a CROSS JOIN {infer} b WHERE a.token_id = b.token_id",
    "SELECT f.layer AS layer, f.feature AS feature, l.bytes AS bytes FROM {features} f JOIN layers l USING (layer) WHERE f.layer = 2 AND f.feature < 5 ORDER BY feature",
    "SELECT l.layer AS layer, count(f.feature) AS n FROM layers l LEFT JOIN {features} f ON f.layer = l.layer AND f.feature < 3 WHERE l.layer < 3 GROUP BY l.layer ORDER BY layer",
    "SELECT count(*) AS n FROM {features} a JOIN {features} b ON a.feature = b.feature WHERE a.layer = 0 AND b.layer = 1 AND a.feature BETWEEN 10 AND 19",
    // subqueries
    "SELECT layer, ffn_contrib FROM {trace} WHERE ffn_contrib > (SELECT avg(ffn_contrib) FROM {trace}) ORDER BY layer",
    "SELECT name FROM tensors WHERE layer IN (SELECT layer FROM {trace} WHERE rank = 1) AND role = 'ffn_down' ORDER BY name",
    "SELECT count(*) AS n FROM tensors WHERE layer NOT IN (SELECT layer FROM layers WHERE layer < 25)",
    "SELECT (SELECT max(layer) FROM layers) AS top, (SELECT count(*) FROM tensors) AS n",
    "SELECT band, n FROM (SELECT layer / 10 AS band, count(*) AS n FROM tensors WHERE layer IS NOT NULL GROUP BY band) s WHERE n > 10 ORDER BY band",
    "SELECT avg(n) AS a FROM (SELECT layer, count(*) AS n FROM tensors GROUP BY layer)",
    "SELECT s.role AS role, s.total AS total FROM (SELECT role, sum(bytes) AS total FROM tensors GROUP BY role) AS s ORDER BY s.total DESC, s.role LIMIT 3",
    "SELECT layer FROM layers WHERE layer IN (SELECT layer FROM {walk}) ORDER BY layer",
    "SELECT layer, feature, gate FROM {walk} WHERE gate > (SELECT avg(gate) FROM {walk}) ORDER BY gate DESC",
    "SELECT x.layer AS layer FROM {trace} x WHERE x.layer IN (SELECT layer FROM {walk}) ORDER BY layer",
    "SELECT i.token AS token, i.prob AS prob FROM {infer} i WHERE i.token_id IN (SELECT token_id FROM {tok}) ORDER BY prob DESC",
    "SELECT role, count(*) AS n FROM tensors WHERE layer IN (SELECT layer FROM layers WHERE gate_encoding = 'Q4_1') GROUP BY role ORDER BY role",
    "SELECT max(n) AS m FROM (SELECT role, count(*) AS n FROM tensors GROUP BY role) x",
    "SELECT layer FROM layers WHERE layer > (SELECT min(layer) FROM {walk}) AND layer < 25 ORDER BY layer",
    "SELECT layer FROM layers WHERE layer IN (SELECT layer FROM {walk} WHERE layer IN (SELECT layer FROM layers WHERE layer > 20)) ORDER BY layer",
    "SELECT (SELECT max(layer) FROM layers WHERE layer > 100) AS none, (SELECT count(*) FROM layers WHERE layer > 100) AS zero",
    "SELECT l.layer AS layer, count(*) AS n FROM layers l JOIN tensors t ON l.layer = t.layer AND t.bytes > (SELECT avg(bytes) FROM tensors) GROUP BY l.layer ORDER BY layer",
    "SELECT role, sum(bytes) + (SELECT count(*) FROM layers) AS s FROM tensors GROUP BY role ORDER BY (SELECT 1), role",
    "SELECT count(*) AS n, sum((SELECT max(layer) FROM layers)) AS s FROM tensors GROUP BY (SELECT 1)",
    // CASE
    "SELECT layer, CASE WHEN ffn_contrib > 0 THEN 'helps' WHEN ffn_contrib < 0 THEN 'hurts' ELSE 'none' END AS effect FROM {trace} WHERE layer IS NOT NULL ORDER BY layer",
    "SELECT CASE WHEN layer < 10 THEN 'early' WHEN layer < 20 THEN 'middle' ELSE 'late' END AS part, count(*) AS n, sum(ffn_contrib) AS s FROM {trace} WHERE layer IS NOT NULL GROUP BY part ORDER BY part",
    "SELECT layer, CASE layer % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' END AS k FROM layers ORDER BY layer",
    "SELECT sum(CASE WHEN role = 'attn_q' THEN bytes ELSE 0 END) AS q, sum(CASE WHEN role = 'attn_k' THEN bytes ELSE 0 END) AS k FROM tensors",
    "SELECT name, CASE WHEN layer IS NULL THEN -1 ELSE layer END AS l FROM tensors ORDER BY l, name LIMIT 5",
    // scalar functions, CAST and ||
    "SELECT name, length(name) AS len, upper(role) AS r, lower(dtype) AS d FROM tensors WHERE layer = 3 ORDER BY name",
    "SELECT substr(name, 1, 5) AS pre, count(*) AS n FROM tensors GROUP BY pre ORDER BY pre",
    "SELECT substr(name, -6) AS tail, substr(name, 3, -2) AS x FROM tensors WHERE layer = 0 ORDER BY name",
    "SELECT round(ffn_contrib, 2) AS r, round(attn_contrib) AS a, abs(contrib) AS c FROM {trace} WHERE layer IS NOT NULL ORDER BY layer",
    "SELECT replace(name, 'blk.', 'layer ') AS n FROM tensors WHERE layer = 1 ORDER BY name",
    "SELECT instr(name, '.') AS dot, trim(role, 'a_') AS r, ltrim(name, 'b') AS l, rtrim(name, 'tweigh.') AS t FROM tensors WHERE layer = 2 ORDER BY name",
    "SELECT coalesce(layer, -1) AS l, ifnull(layer, 99) AS i, nullif(layer, 0) AS z FROM tensors ORDER BY name LIMIT 6",
    "SELECT max(layer, 10) AS a, min(layer, 10) AS b FROM layers ORDER BY layer",
    "SELECT CAST(bytes AS REAL) / 1024 AS kib, CAST(layer AS TEXT) || ':' || role AS tag FROM tensors WHERE layer = 4 ORDER BY name",
    "SELECT CAST(prob * 1000000 AS INTEGER) AS ppm, token FROM {infer} ORDER BY rank",
    "SELECT upper(token) AS t, length(token) AS n FROM {infer} ORDER BY rank",
    "SELECT 'x' || layer || 'y' AS s FROM layers WHERE layer < 3 ORDER BY layer",
    "SELECT CAST(round(avg(prob) * 100) AS INTEGER) AS pct FROM {infer}",
    "SELECT t.token AS token, t.position AS pos FROM {tok} t WHERE t.position > 0 ORDER BY pos DESC",
    "SELECT count(*) AS n, max(length(token)) AS longest FROM {tok}",
    // SELECT without FROM
    "SELECT 1 + 2 AS three, 'a' || 'b' AS ab, 7 / 2 AS half, 7 % 3 AS rem, 7.0 / 2 AS real",
    "SELECT abs(-5) AS a, round(2.567, 2) AS r, lower('ABC') AS l, upper('abc') AS u, length('héllo') AS n",
    "SELECT coalesce(NULL, NULL, 'z') AS c, nullif(3, 3) AS n, nullif(3, 4) AS m, ifnull(NULL, 'x') AS i",
    "SELECT CASE WHEN 1 > 2 THEN 'a' ELSE 'b' END AS c, CAST('42' AS INTEGER) AS i, CAST(3.9 AS INTEGER) AS t, CAST(5 AS REAL) AS r",
    "SELECT substr('hello world', 7) AS w, instr('hello', 'l') AS i, replace('aaa', 'a', 'bb') AS r, trim('  x  ') AS t",
    // OFFSET
    "SELECT layer FROM layers ORDER BY layer DESC LIMIT 3 OFFSET 2",
    "SELECT name FROM tensors ORDER BY name LIMIT 4 OFFSET 10",
    "SELECT rank, token FROM {infer} ORDER BY prob DESC LIMIT 3 OFFSET 1",
    // aggregates over statements' rows
    "SELECT count(*) AS n, sum(ffn_contrib) AS f, sum(attn_contrib) AS a, max(contrib) AS m, min(rank) AS r FROM {trace}",
    "SELECT who, count(*) AS n, avg(ffn_contrib) AS f FROM {trace} GROUP BY who ORDER BY who",
    "SELECT layer, count(*) AS n, max(gate) AS g, min(activation) AS a FROM {walk} GROUP BY layer ORDER BY layer",
    "SELECT count(DISTINCT top_token) AS n FROM {walk}",
    "SELECT layer FROM {trace} WHERE rank <= 10 AND layer IS NOT NULL ORDER BY layer LIMIT 5",
    "SELECT layer, ffn_contrib FROM {trace} WHERE ffn_contrib > 1 ORDER BY ffn_contrib DESC",
    "SELECT sum(prob) AS p, count(*) AS n FROM {infer} WHERE token LIKE ' %'",
    "SELECT DISTINCT who FROM {trace} ORDER BY who",
    "SELECT layer % 2 AS parity, sum(ffn_contrib) AS s FROM {trace} WHERE layer IS NOT NULL GROUP BY parity HAVING count(*) > 3 ORDER BY parity",
    "SELECT feature % 7 AS m, count(*) AS n FROM {feat} GROUP BY m ORDER BY m",
    "SELECT layer, count(*) AS n FROM {feat} WHERE feature BETWEEN 100 AND 199 GROUP BY layer",
];

/// A value as a sqlite literal (text as UTF-8 bytes in hex: the shell reads none of it
/// as syntax; floats in Rust's round-trip notation: the same double in sqlite).
fn sql_literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => (*b as i64).to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Text(t) => format!(
            "CAST(X'{}' AS TEXT)",
            t.bytes().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        Value::List(_) => unreachable!("list columns are not copied"),
    }
}

/// The query in LQL (relations as statements) and in sqlite (relations as tables).
fn texts(q: &str) -> (String, String) {
    let (mut ours, mut theirs) = (q.to_string(), q.to_string());
    for (name, rel) in RELATIONS {
        ours = ours.replace(&format!("{{{name}}}"), rel);
        theirs = theirs.replace(&format!("{{{name}}}"), name);
    }
    for (name, lql_table, copy) in TABLE_COPIES {
        ours = ours.replace(&format!("{{{name}}}"), lql_table);
        theirs = theirs.replace(&format!("{{{name}}}"), copy);
    }
    (ours, theirs)
}

/// sqlite's copies: `layers`, `tensors` and each relation's rows (scalar columns).
fn sqlite_db(conn: &Connection, dir: &Path) -> std::path::PathBuf {
    let mut script = String::from("BEGIN;\n");
    let sources: Vec<(String, String)> = [("layers", "layers"), ("tensors", "tensors")]
        .iter()
        .map(|(n, t)| (n.to_string(), format!("SELECT * FROM {t}")))
        .chain(
            RELATIONS
                .iter()
                .map(|(n, rel)| (n.to_string(), format!("SELECT * FROM {rel}"))),
        )
        .collect();
    for (name, q) in sources {
        let rows = conn
            .execute(&q)
            .unwrap_or_else(|e| panic!("{q}: {}", e.message));
        let keep: Vec<usize> = (0..rows.columns.len())
            .filter(|&i| !rows.rows.iter().any(|r| matches!(r[i], Value::List(_))))
            .collect();
        let cols: Vec<String> = keep
            .iter()
            .map(|&i| format!("\"{}\"", rows.columns[i].name))
            .collect();
        script.push_str(&format!("CREATE TABLE {name}({});\n", cols.join(", ")));
        for r in &rows.rows {
            let cells: Vec<String> = keep.iter().map(|&i| sql_literal(&r[i])).collect();
            script.push_str(&format!(
                "INSERT INTO {name} VALUES({});\n",
                cells.join(",")
            ));
        }
    }
    script.push_str("COMMIT;\n");
    let db = dir.join("relations.db");
    sqlite::load(&db, &script);
    db
}

/// A row as comparable text (for multiset comparison of unordered results).
fn key(row: &[String]) -> String {
    row.join("\u{1}")
}

#[test]
fn statements_as_relations_agree_with_sqlite3() {
    assert!(QUERIES.len() >= 60, "{} queries", QUERIES.len());
    if !sqlite::available() {
        assert!(
            std::env::var("CI").is_err(),
            "sqlite3 is missing under CI=true"
        );
        eprintln!("note: sqlite3 is not installed; nothing compared");
        return;
    }
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&conn, dir.path());
    for q in QUERIES {
        let (lql_q, sqlite_q) = texts(q);
        let before = conn.prepare(&lql_q).unwrap().column_names().unwrap();
        let ours = conn
            .execute(&lql_q)
            .unwrap_or_else(|e| panic!("{lql_q}: {}", e.message));
        let names: Vec<String> = ours.column_names().iter().map(|s| s.to_string()).collect();
        assert_eq!(before, names, "columns before running differ for {q}");
        let theirs = sqlite::query(&db, &sqlite_q);
        assert_eq!(ours.len(), theirs.len(), "row count differs for {q}");
        if let Some(first) = theirs.first() {
            let their_names: Vec<&String> = first.keys().collect();
            assert_eq!(
                names.iter().collect::<Vec<_>>(),
                their_names,
                "column names differ for {q}"
            );
        }
        // Pair rows in order, or (without ORDER BY) by their sorted texts.
        let mut pairs: Vec<(&Vec<Value>, &serde_json::Map<String, serde_json::Value>)> =
            ours.rows.iter().zip(&theirs).collect();
        if !q.contains("ORDER BY") {
            let mut a: Vec<&Vec<Value>> = ours.rows.iter().collect();
            let mut b: Vec<&serde_json::Map<String, serde_json::Value>> = theirs.iter().collect();
            a.sort_by_key(|r| key(&r.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>()));
            b.sort_by_key(|r| key(&r.values().map(|v| v.to_string()).collect::<Vec<_>>()));
            // Sorted independently: compare each LQL row with the sqlite row it matches.
            for ra in &a {
                assert!(
                    b.iter().any(|rb| ra
                        .iter()
                        .zip(rb.values())
                        .all(|(x, y)| sqlite::same_cell(x, y))),
                    "{q}: LQL row {ra:?} is not in sqlite3's result"
                );
            }
            pairs.clear();
        }
        for (i, (a, b)) in pairs.into_iter().enumerate() {
            for ((name, cell), other) in names.iter().zip(a).zip(b.values()) {
                assert!(
                    sqlite::same_cell(cell, other),
                    "{q}: row {i} column {name}: LQL {cell:?}, sqlite3 {other}"
                );
            }
        }
    }
    eprintln!("{} queries agree with sqlite3", QUERIES.len());
}

/// A join too large to hold is refused with its own code, not allowed to exhaust memory.
#[test]
fn a_join_beyond_the_bound_is_refused() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let e = conn
        .execute("SELECT count(*) FROM tokens a, tokens b")
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0206", "{}", e.message);
    // The connection still answers.
    let r = conn
        .execute("SELECT count(*) AS n FROM layers a, layers b")
        .unwrap();
    assert_eq!(r.rows[0][0], Value::Int(900));
}

/// The first column of `sql`'s rows, one line each (EXPLAIN's text).
fn lines(conn: &Connection, sql: &str) -> String {
    conn.execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {}", e.message))
        .rows
        .iter()
        .map(|r| format!("{:?}", r[0]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// EXPLAIN ANALYZE's line for the `features` scan of `q`.
fn analyzed_scan(conn: &Connection, q: &str) -> String {
    lines(conn, &format!("EXPLAIN ANALYZE {q}"))
        .lines()
        .find(|l| l.contains("TableScan features"))
        .unwrap_or_else(|| panic!("{q}: no features scan"))
        .to_string()
}

/// WHERE conjuncts that read one table of a join narrow that table's scan (the layers and
/// features of a `features` side); the NULL side of a LEFT join is scanned whole. A LIMIT
/// that nothing before it narrows stops the scan itself.
#[test]
fn where_and_limit_narrow_the_scans() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let plan = |q: &str| lines(&conn, &format!("EXPLAIN PLAN {q}"));
    let p = plan("SELECT f.top_token FROM features f JOIN layers l USING (layer) WHERE f.layer = 20 AND l.bytes > 0 AND f.feature IN (1, 2)");
    assert!(
        p.contains("TableScan features layers=[20] features=1-2"),
        "{p}"
    );
    let p =
        plan("SELECT count(*) FROM layers l LEFT JOIN features f USING (layer) WHERE f.layer = 20");
    assert!(p.contains("TableScan features est_rows=46080"), "{p}");
    let p = plan("SELECT count(*) FROM features f LEFT JOIN layers l USING (layer) WHERE f.layer BETWEEN 3 AND 4");
    assert!(p.contains("TableScan features layers=3-4"), "{p}");
    let p = plan("SELECT layer, feature FROM features LIMIT 10 OFFSET 5");
    assert!(p.contains("TableScan features stop_after=15"), "{p}");
    // WHERE over `features` under a LIMIT moves into the scan, which stops once enough
    // rows pass; the rows are those of the Filter it replaces.
    let q = "SELECT layer, feature FROM features WHERE feature % 100 = 7 LIMIT 3 OFFSET 16";
    let p = plan(q);
    assert!(
        p.contains("TableScan features filter=(feature % 100 = 7) stop_after=19"),
        "{p}"
    );
    assert!(!p.contains("Filter"), "{p}");
    let ordered = "SELECT layer, feature FROM features WHERE feature % 100 = 7 ORDER BY layer, feature LIMIT 3 OFFSET 16";
    assert!(plan(ordered).contains("Filter"));
    assert_eq!(
        conn.execute(q).unwrap().rows,
        conn.execute(ordered).unwrap().rows
    );
    let p = plan("SELECT layer FROM features WHERE feature IN (SELECT 3) LIMIT 1");
    assert!(p.contains("Filter") && !p.contains("stop_after"), "{p}");
    // A LIMIT over a filtered label scan labels only the layers it scanned.
    let scan = analyzed_scan(
        &conn,
        "SELECT layer, feature, top_token FROM features WHERE layer >= 26 AND top_token LIKE '%' LIMIT 2",
    );
    assert!(scan.contains("rows=2 "), "{scan}");
    let computed: usize = scan.split("labels_computed=").nth(1).map_or(0, |t| {
        t.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    });
    assert!(computed < 4 * 1536, "{scan}");
    let scan = analyzed_scan(
        &conn,
        "SELECT layer, feature, top_token FROM features LIMIT 10 OFFSET 5",
    );
    assert!(scan.contains("rows=15 "), "{scan}");
    let rows = conn
        .execute("SELECT layer, feature FROM features LIMIT 3 OFFSET 1535")
        .unwrap();
    let got: Vec<(i64, i64)> = rows
        .rows
        .iter()
        .map(|r| match (&r[0], &r[1]) {
            (Value::Int(a), Value::Int(b)) => (*a, *b),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, vec![(0, 1535), (1, 0), (1, 1)]);
}

/// A table function takes parameters like the statement it is: `TRACE(?, FOR => ?)`.
#[test]
fn table_functions_take_parameters() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let mut st = conn
        .prepare("SELECT layer, ffn_contrib FROM TRACE(?, FOR => ?) WHERE ffn_contrib > 1 ORDER BY layer")
        .unwrap();
    let with = st
        .query(lql::params!["The capital of France is", " Paris"])
        .unwrap();
    let literal = conn
        .execute("SELECT layer, ffn_contrib FROM TRACE('The capital of France is', FOR => ' Paris') WHERE ffn_contrib > 1 ORDER BY layer")
        .unwrap();
    assert!(!literal.rows.is_empty());
    assert_eq!(with.rows, literal.rows);
}

/// IN and scalar subqueries are bound with their statement: each is an input of the
/// operator that holds it, EXPLAIN prints its tree there, ANALYZE measures it, and the
/// statement's effects include the subquery's.
#[test]
fn subqueries_are_inputs_of_the_operators_that_hold_them() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let q = "SELECT x FROM (SELECT 1 AS x) WHERE x IN (SELECT layer FROM TRACE('The capital of France is'))";
    let text = |sql: &str| lines(&conn, sql);
    let plan = text(&format!("EXPLAIN PLAN {q}"));
    let filter = plan.find("Filter x IN").expect(&plan);
    let sub = plan.find("Subquery SELECT layer FROM").expect(&plan);
    assert!(filter < sub, "{plan}");
    assert!(plan.contains("effects: reads the model"), "{plan}");
    let analyzed = text(&format!("EXPLAIN ANALYZE {q}"));
    assert!(analyzed.contains("layers_run=30"), "{analyzed}");
    assert_eq!(conn.execute(q).unwrap().rows, vec![vec![Value::Int(1)]]);
    // A scalar subquery has its column's type before it runs, and is checked with it.
    let mut st = conn
        .prepare(
            "SELECT (SELECT max(layer) FROM layers) AS m, (SELECT avg(bytes) FROM tensors) AS b",
        )
        .unwrap();
    let types: Vec<ValueType> = st.columns().unwrap().iter().map(|c| c.ty).collect();
    assert_eq!(types, vec![ValueType::Int, ValueType::Float]);
    for q in [
        "SELECT layer FROM layers WHERE (SELECT 'a') > 3",
        "SELECT layer FROM layers WHERE layer IN (SELECT name FROM tensors)",
        "SELECT layer FROM layers ORDER BY (SELECT 'a') + 1",
        "SELECT layer FROM layers GROUP BY layer HAVING (SELECT 'a') > 3",
        "SELECT l.layer FROM layers l JOIN layers m ON l.layer = (SELECT 'a')",
    ] {
        // Refused when bound (`effects` binds without running).
        let e = conn.effects(q).unwrap_err();
        assert_eq!(e.code(), "LQL-E0210", "{q}: {}", e.message);
        assert!(e.span.is_some(), "{q}");
    }
    // A subquery's binding error comes before anything runs, with its span.
    let e = conn
        .execute("SELECT layer FROM layers WHERE layer IN (SELECT nosuch FROM layers)")
        .unwrap_err();
    assert!(
        e.message.contains("unknown column `nosuch`"),
        "{}",
        e.message
    );
    assert!(e.span.is_some());
}

/// Which statements may stand in FROM is decided from their declared effects: one that
/// only reads the model may (DIFF CURRENT: no edits, no rows); one that changes the
/// session or touches a file is refused, naming what it would do.
#[test]
fn statements_in_from_are_held_to_their_effects() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let r = conn
        .execute("SELECT count(*) AS n FROM (DIFF CURRENT)")
        .unwrap();
    assert_eq!(r.rows[0][0], Value::Int(0));
    for (q, says) in [
        (
            "SELECT * FROM (INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B'))",
            "INSERT cannot be a relation in FROM: it edits the model state",
        ),
        (
            "SELECT * FROM (TRACE 'x' SAVE 't.svg')",
            "TRACE cannot be a relation in FROM: it writes \"t.svg\"",
        ),
        (
            "SELECT * FROM (INSPECT 'c.vindex')",
            "INSPECT cannot be a relation in FROM: it reads \"c.vindex\"",
        ),
        (
            "SELECT * FROM (SET STEERING = OFF)",
            "SET STEERING cannot be a relation in FROM: it changes the connection's steering",
        ),
    ] {
        let e = conn.execute(q).unwrap_err();
        assert!(e.message.contains(says), "{q}: {}", e.message);
    }
}

/// The `labels_computed=` figure of an EXPLAIN ANALYZE line.
fn labels_computed(line: &str) -> usize {
    line.split("labels_computed=").nth(1).map_or(0, |t| {
        t.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0)
    })
}

/// Rows are pulled through the operator tree: a LIMIT stops pulling once it has its rows,
/// so a Filter the scan cannot take (it holds a subquery) still stops the `features` scan
/// after the first labelling pass whose rows pass; every node reports the rows it passed on.
#[test]
fn rows_are_pulled_through_the_tree() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let q = "SELECT layer, feature, top_token FROM features WHERE top_token LIKE '%' AND feature IN (SELECT 7) LIMIT 2";
    let analyzed = lines(&conn, &format!("EXPLAIN ANALYZE {q}"));
    let line = |op: &str| {
        analyzed
            .lines()
            .find(|l| l.contains(op))
            .unwrap_or_else(|| panic!("no {op} in {analyzed}"))
            .to_string()
    };
    assert!(line("Filter").contains("rows=2 "), "{analyzed}");
    assert!(line("Limit").contains("rows=2 "), "{analyzed}");
    let scan = line("TableScan features");
    // One labelling pass: the first two layers (2 × 1536 features), not all 30.
    assert!(scan.contains("rows=3072 "), "{analyzed}");
    assert!(labels_computed(&scan) <= 2 * 1536, "{analyzed}");
    let ordered = "SELECT layer, feature, top_token FROM features WHERE top_token LIKE '%' AND feature IN (SELECT 7) ORDER BY layer, feature LIMIT 2";
    assert_eq!(
        conn.execute(q).unwrap().rows,
        conn.execute(ordered).unwrap().rows
    );
    // Late labels are computed for the rows that reach them: those the LIMIT lets through.
    let late = lines(
        &conn,
        "EXPLAIN ANALYZE SELECT top_token FROM features WHERE feature IN (SELECT 7) LIMIT 4",
    );
    let labels = late
        .lines()
        .find(|l| l.contains("LateLabels"))
        .unwrap_or_else(|| panic!("{late}"));
    assert!(labels.contains("rows=4 "), "{late}");
    assert!(labels_computed(labels) <= 4, "{late}");
    let scan = late
        .lines()
        .find(|l| l.contains("TableScan features"))
        .unwrap();
    assert!(scan.contains("rows=6144 "), "{late}");
}

/// `Statement::stream` computes each row when it is read: reading the first rows of the
/// `features` table labels the first layers only (another connection of the database,
/// which shares the label cache, finds them labelled and layer 5 not). The stream holds its
/// connection until dropped; its rows are those `query` returns.
#[test]
fn a_row_stream_computes_rows_as_they_are_read() {
    let db = lql::Database::open(default_model_path().to_str().unwrap()).unwrap();
    let conn = db.connect().unwrap();
    let other = db.connect().unwrap();
    let mut st = conn
        .prepare("SELECT layer, feature, top_token FROM features")
        .unwrap();
    let mut stream = st.stream(()).unwrap();
    assert_eq!(
        stream
            .columns()
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["layer", "feature", "top_token"]
    );
    let mut first = Vec::new();
    while let Some(row) = stream.next_row().unwrap() {
        first.push((
            row.get::<_, i64>("layer").unwrap(),
            row.get::<_, i64>("feature").unwrap(),
            row.get::<_, String>("top_token").unwrap(),
        ));
        if first.len() == 3 {
            break;
        }
    }
    assert_eq!(
        first.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
        [(0, 0), (0, 1), (0, 2)]
    );
    let busy = conn.execute("SELECT 1").unwrap_err();
    assert_eq!(busy.code(), "LQL-E0202", "{}", busy.message);
    let computed = |q: &str| {
        lines(&other, &format!("EXPLAIN ANALYZE {q}"))
            .lines()
            .map(labels_computed)
            .sum::<usize>()
    };
    assert_eq!(
        computed("SELECT top_token FROM features WHERE layer = 0 AND feature < 3"),
        0
    );
    assert_eq!(
        computed("SELECT top_token FROM features WHERE layer = 5"),
        1536
    );
    drop(stream);
    // Dropped, the statement is over and the connection free.
    let head = conn
        .execute("SELECT layer, feature, top_token FROM features LIMIT 3")
        .unwrap();
    let texts: Vec<String> = head.rows.iter().map(|r| format!("{:?}", r[2])).collect();
    assert_eq!(
        texts,
        first
            .iter()
            .map(|r| format!("{:?}", Value::Text(r.2.clone())))
            .collect::<Vec<_>>()
    );
    // Read to the end, a stream gives what `query` gives; a failing statement fails when
    // it starts, with its span.
    let mut st = conn
        .prepare("SELECT layer, features FROM layers WHERE layer > ? ORDER BY layer DESC")
        .unwrap();
    let streamed = st.stream(lql::params![25]).unwrap().into_rows().unwrap();
    assert_eq!(streamed, st.query(lql::params![25]).unwrap());
    let n = st
        .stream(lql::params![27])
        .unwrap()
        .collect::<lql::Result<Vec<_>>>()
        .unwrap()
        .len();
    assert_eq!(n, 2);
    let e = conn
        .prepare("SELECT nope FROM layers")
        .and_then(|mut s| s.stream(()).map(|_| ()))
        .unwrap_err();
    assert!(e.span.is_some(), "{}", e.message);
    // An interrupt between reads stops the statement at its next pull: the read fails with
    // `LQL-E0601`, the stream is over, and the connection runs the next statement.
    let mut st = conn.prepare("SELECT layer, feature FROM features").unwrap();
    let mut stream = st.stream(()).unwrap();
    assert!(stream.next_row().unwrap().is_some());
    conn.interrupt_handle().interrupt();
    let mut read = 1;
    let e = loop {
        match stream.next_row() {
            Ok(Some(_)) => read += 1,
            Ok(None) => panic!("the interrupted stream ended after {read} rows"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.code(), "LQL-E0601", "{}", e.message);
    assert!(read < 46080, "{read}");
    assert!(stream.next_row().unwrap().is_none());
    drop(stream);
    assert_eq!(
        conn.execute("SELECT 1 AS one").unwrap().rows,
        [[Value::Int(1)]]
    );
}
