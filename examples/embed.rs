//! Embedding LQL in a Rust program: open the default model by its catalogue name (fetched
//! into the local cache on first use), run INFER, and read the typed rows.
//!
//! ```text
//! cargo run --release -p lql-engine --example embed
//! cargo run --release -p lql-engine --example embed -- "The capital of Italy is"
//! ```

use lql::{Connection, Progress};

fn main() -> Result<(), lql::Error> {
    let prompt = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "The capital of France is".to_string());

    // A progress handler shows a download the first time the model is fetched.
    let conn = Connection::open_with_progress("smollm2-135m-instruct", |p: &Progress| {
        if let Some(total) = p.total {
            eprint!("\r{} {}/{} bytes", p.task, p.done, total);
        }
        if p.finished {
            eprintln!();
        }
    })?;

    // One statement; its rows come back typed.
    let rows = conn.execute(&format!("INFER {} TOP 5;", lql::quote(&prompt)))?;
    println!("next token after {prompt:?}:");
    for row in rows.iter() {
        let rank: i64 = row.get("rank")?;
        let token: String = row.get("token")?;
        let prob: f64 = row.get("prob")?;
        let shown = format!("{token:?}");
        println!("  {rank}. {shown:<12} {:6.2}%", prob * 100.0);
    }

    // A prepared statement can be run again; GENERATE returns one row.
    let mut stmt = conn.prepare(&format!("GENERATE {} MAX 12", lql::quote(&prompt)))?;
    let rows = stmt.query(())?;
    let text: String = rows.row(0).expect("one row").get("text")?;
    println!("greedy continuation: {text:?}");

    // Errors are data: render them the way the REPL does.
    let bad = "INFER 'x' TOPP 5;";
    if let Err(e) = conn.execute(bad) {
        eprint!("{}", e.render("example", bad, false));
    }
    Ok(())
}
