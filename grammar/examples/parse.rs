//! Parses each argument and prints the statements (canonical LQL) or the syntax error:
//! `cargo run -p lql-grammar --example parse -- "WALK 'x' TOP 5"`.
fn main() {
    for src in std::env::args().skip(1) {
        match lql_grammar::parse(&src) {
            Ok(s) => println!(
                "OK {:?}",
                s.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            ),
            Err(e) => println!(
                "{src:?}\n  ERR {} @{:?} '{}' labels={:?} help={:?}",
                e.message,
                e.span,
                src.get(e.span.range()).unwrap_or("?"),
                e.labels,
                e.help
            ),
        }
    }
}
