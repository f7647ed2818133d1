//! Counters and latency histograms, rendered as Prometheus text at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lql::generation::BatchObserver;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A cumulative histogram of durations.
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, name: &str, labels: &str, out: &mut String) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}le=\"{b}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", self.count);
        let l = labels.trim_end_matches(',');
        let l = if l.is_empty() {
            String::new()
        } else {
            format!("{{{l}}}")
        };
        let _ = writeln!(out, "{name}_sum{l} {}", self.sum);
        let _ = writeln!(out, "{name}_count{l} {}", self.count);
    }
}

/// The routes requests are counted under.
pub const ROUTES: [&str; 10] = [
    "models",
    "completions",
    "chat_completions",
    "responses",
    "lql",
    "embeddings",
    "tokenize",
    "detokenize",
    "health",
    "metrics",
];

/// Everything `/metrics` reports.
#[derive(Default)]
pub struct Metrics {
    requests: [AtomicU64; ROUTES.len()],
    errors: [AtomicU64; ROUTES.len()],
    rejected_busy: AtomicU64,
    rejected_connections: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    cancelled: AtomicU64,
    decode_steps: AtomicU64,
    decode_rows: AtomicU64,
    prefill_positions: AtomicU64,
    prompt_cache_hits: AtomicU64,
    prompt_cache_tokens: AtomicU64,
    latency: Mutex<[Histogram; ROUTES.len()]>,
    first_token: Mutex<Histogram>,
}

fn route_index(route: &str) -> usize {
    ROUTES.iter().position(|r| *r == route).unwrap_or(0)
}

impl Metrics {
    /// One request to `route` finished after `secs`, successfully or not.
    pub fn request(&self, route: &str, ok: bool, secs: f64) {
        let i = route_index(route);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut h) = self.latency.lock() {
            h[i].observe(secs);
        }
    }

    pub fn rejected_busy(&self) {
        self.rejected_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection over `--max-connections`, answered 503 and closed.
    pub fn rejected_connection(&self) {
        self.rejected_connections.fetch_add(1, Ordering::Relaxed);
    }

    pub fn tokens(&self, prompt: usize, completion: usize) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
    }

    pub fn first_token(&self, secs: f64) {
        if let Ok(mut h) = self.first_token.lock() {
            h.observe(secs);
        }
    }

    /// Prometheus text exposition.
    pub fn render(
        &self,
        busy: usize,
        waiting: usize,
        parallel: usize,
        sessions: usize,
        cache_bytes: usize,
    ) -> String {
        let mut s = String::new();
        s.push_str("# HELP lql_requests_total Requests answered, by route.\n# TYPE lql_requests_total counter\n");
        for (i, r) in ROUTES.iter().enumerate() {
            let _ = writeln!(
                s,
                "lql_requests_total{{route=\"{r}\"}} {}",
                self.requests[i].load(Ordering::Relaxed)
            );
        }
        s.push_str("# HELP lql_request_errors_total Requests answered with an error status, by route.\n# TYPE lql_request_errors_total counter\n");
        for (i, r) in ROUTES.iter().enumerate() {
            let _ = writeln!(
                s,
                "lql_request_errors_total{{route=\"{r}\"}} {}",
                self.errors[i].load(Ordering::Relaxed)
            );
        }
        let counters = [
            (
                "lql_rejected_busy_total",
                "Requests refused with 429 (queue full).",
                &self.rejected_busy,
            ),
            (
                "lql_rejected_connections_total",
                "Connections refused with 503 (over --max-connections).",
                &self.rejected_connections,
            ),
            (
                "lql_prompt_tokens_total",
                "Prompt tokens prefilled.",
                &self.prompt_tokens,
            ),
            (
                "lql_completion_tokens_total",
                "Tokens generated.",
                &self.completion_tokens,
            ),
            (
                "lql_cancelled_total",
                "Generations stopped early (client gone or shutdown).",
                &self.cancelled,
            ),
            (
                "lql_decode_steps_total",
                "Batched decode steps run.",
                &self.decode_steps,
            ),
            (
                "lql_decode_rows_total",
                "Next tokens decoded by those steps (rows / steps is the mean batch size; prompts prefilled in a step are not counted).",
                &self.decode_rows,
            ),
            (
                "lql_prefill_positions_total",
                "Prompt positions run by prefill chunks of those steps (a prompt whose client leaves stops at its next chunk).",
                &self.prefill_positions,
            ),
            (
                "lql_prompt_cache_hits_total",
                "Prompts that started from a cached prefix.",
                &self.prompt_cache_hits,
            ),
            (
                "lql_prompt_cache_tokens_total",
                "Prompt positions taken from the prefix cache instead of prefilled.",
                &self.prompt_cache_tokens,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let gauges = [
            ("lql_slots_busy", "Requests decoding now.", busy),
            ("lql_slots_total", "Decoding slots (--parallel).", parallel),
            ("lql_queue_depth", "Requests waiting for a slot.", waiting),
            ("lql_sessions", "X-LQL-Session sessions held.", sessions),
            (
                "lql_edit_cache_bytes",
                "Bytes of the f32 layers INSERT optimises through, one copy shared by every session.",
                cache_bytes,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        s.push_str("# HELP lql_request_duration_seconds Request latency, by route.\n# TYPE lql_request_duration_seconds histogram\n");
        if let Ok(h) = self.latency.lock() {
            for (i, r) in ROUTES.iter().enumerate() {
                h[i].render(
                    "lql_request_duration_seconds",
                    &format!("route=\"{r}\","),
                    &mut s,
                );
            }
        }
        s.push_str("# HELP lql_time_to_first_token_seconds Time from request to first streamed token.\n# TYPE lql_time_to_first_token_seconds histogram\n");
        if let Ok(h) = self.first_token.lock() {
            h.render("lql_time_to_first_token_seconds", "", &mut s);
        }
        s
    }
}

/// What the engine's decode scheduler counts.
impl BatchObserver for Metrics {
    /// One batched decode step ran the next token of `decoding` sequences and
    /// `prefilling` positions of prompt chunks.
    fn step(&self, decoding: usize, prefilling: usize) {
        self.decode_steps.fetch_add(1, Ordering::Relaxed);
        self.decode_rows
            .fetch_add(decoding as u64, Ordering::Relaxed);
        self.prefill_positions
            .fetch_add(prefilling as u64, Ordering::Relaxed);
    }

    /// A prompt started from `positions` cached positions.
    fn prompt_cache_hit(&self, positions: usize) {
        self.prompt_cache_hits.fetch_add(1, Ordering::Relaxed);
        self.prompt_cache_tokens
            .fetch_add(positions as u64, Ordering::Relaxed);
    }

    fn choice_ended(&self, tokens: usize) {
        self.tokens(0, tokens);
    }

    fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }
}
