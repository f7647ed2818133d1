//! `INSERT INTO edges SELECT …` and CSV fact files on SmolLM2: a query's rows insert as the
//! same rows written as VALUES do (bit-identical logits), its columns are found by name and
//! typed at bind time, bad rows are refused with nothing applied; `INSERT INTO edges FROM
//! "facts.csv"` reads the rows a CSV file holds.

use lql::{Connection, Rows, Value};

const PROMPT: &str = "The Eiffel Tower is located in the city of";

fn logits(c: &Connection) -> Rows {
    c.execute(&format!("INFER {PROMPT:?} TOP 50")).unwrap()
}

fn edges(c: &Connection) -> Vec<Vec<Value>> {
    c.execute("SELECT entity, relation, target, prompt FROM edges")
        .unwrap()
        .rows
}

#[test]
fn a_query_inserts_what_the_same_values_insert() {
    let by_values = lql_tests::connect_default();
    by_values
        .execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES \
             ('Eiffel Tower', 'location', 'Rome', '{PROMPT}')"
        ))
        .unwrap();
    let by_query = lql_tests::connect_default();
    let insert = format!(
        "INSERT INTO edges SELECT 'Eiffel Tower' AS entity, 'location' AS relation, \
         'Rome' AS target, '{PROMPT}' AS prompt"
    );
    // The plan: the query's tree under the insert.
    let plan = by_query
        .execute(&format!("EXPLAIN PLAN {insert}"))
        .unwrap()
        .rows
        .iter()
        .map(|r| r[0].to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("OverlayInsert edges from=query"), "{plan}");
    assert!(plan.contains("OneRow"), "{plan}");
    let r = by_query.execute(&insert).unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    assert_eq!(edges(&by_query), edges(&by_values));
    assert_eq!(logits(&by_query).rows, logits(&by_values).rows);
    assert_eq!(logits(&by_query).rows[0][1].to_string().trim(), "Rome");

    // A query over the model's tables: the edit copied with another target, the prompt
    // column left out (NULL: the row's default prompt is not used, the copied one is).
    let r = by_query
        .execute(
            "INSERT INTO edges SELECT entity, 'capital' AS relation, 'Berlin' AS target, prompt \
             FROM edges WHERE entity = 'Eiffel Tower'",
        )
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    let e = edges(&by_query);
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(e[1][2], Value::from("Berlin"));
    assert_eq!(e[1][3], Value::from(PROMPT));
}

#[test]
fn bad_queries_are_refused_at_bind_and_bad_rows_with_nothing_applied() {
    let c = lql_tests::connect_default();
    let e = c
        .execute("INSERT INTO edges SELECT 'A' AS entity, 'b' AS relation")
        .unwrap_err();
    assert!(e.to_string().contains("needs a column named target"), "{e}");
    let e = c
        .execute("INSERT INTO edges SELECT 'A' AS entity, 'b' AS relation, 3 AS target")
        .unwrap_err();
    assert!(e.to_string().contains("column target is"), "{e}");
    assert!(e.to_string().contains("must hold text"), "{e}");
    // No rows; a NULL; an empty string: refused, and no edit is in force afterwards.
    let e = c
        .execute("INSERT INTO edges SELECT entity, relation, target FROM edges")
        .unwrap_err();
    assert!(e.to_string().contains("gave no rows"), "{e}");
    let e = c
        .execute(
            "INSERT INTO edges SELECT CAST(NULL AS TEXT) AS entity, 'b' AS relation, 'c' AS target",
        )
        .unwrap_err();
    assert!(e.to_string().contains("row 1: entity is NULL"), "{e}");
    let e = c
        .execute("INSERT INTO edges SELECT 'A' AS entity, '' AS relation, 'c' AS target")
        .unwrap_err();
    assert!(e.to_string().contains("row 1: relation is empty"), "{e}");
    assert!(edges(&c).is_empty());
}

#[test]
fn a_csv_fact_file_inserts_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("facts.csv");
    std::fs::write(
        &path,
        format!(
            "entity,relation,target,prompt\n\
             Eiffel Tower,location,Rome,\"{PROMPT}\"\n"
        ),
    )
    .unwrap();
    let c = lql_tests::connect_default();
    let r = c
        .execute(&format!(
            "INSERT INTO edges FROM {:?}",
            path.display().to_string()
        ))
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    let e = edges(&c);
    assert_eq!(
        e,
        vec![vec![
            Value::from("Eiffel Tower"),
            Value::from("location"),
            Value::from("Rome"),
            Value::from(PROMPT)
        ]]
    );
    assert_eq!(logits(&c).rows[0][1].to_string().trim(), "Rome");

    // A malformed file is refused by name, with nothing applied.
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "entity,relation,answer\nA,b,c\n").unwrap();
    let e = c
        .execute(&format!(
            "INSERT INTO edges FROM {:?}",
            bad.display().to_string()
        ))
        .unwrap_err();
    assert!(e.to_string().contains("bad.csv"), "{e}");
    assert!(e.to_string().contains("\"answer\""), "{e}");
    assert_eq!(edges(&c).len(), 1);
}
