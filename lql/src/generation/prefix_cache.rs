//! The prompt-prefix cache: key/value state of recent prompts, so a request whose prompt
//! starts like a recent one (a chat's history, a shared system prompt or document) skips
//! prefilling that part.
//!
//! Exactness: the decode scheduler prefills every prompt in chunks of [`PrefixCache::chunk`]
//! positions starting at multiples of it ([`PrefixCache::next_chunk`]), and the cache keeps
//! and reuses state only up to such a boundary. So a position's keys and values are always
//! computed by the same pass over the same rows, whether a request starts cold or from a
//! cached prefix: a warm request's logits are bit-identical to the same request run cold
//! (alone in its steps; `serve/tests/prefix_cache.rs`).
//!
//! Entries are keyed by their tokens and by the executor that computed them (a steered
//! request's executor differs, and such requests neither use nor fill the cache), bounded
//! in bytes, and evicted least recently used first.

use lql_exec::Session;

/// One cached prefix.
struct Entry {
    tokens: Vec<u32>,
    session: Session,
    bytes: usize,
    used: u64,
}

/// Recent prompts' key/value state, by prefix.
pub struct PrefixCache {
    chunk: usize,
    capacity: usize,
    entries: Vec<Entry>,
    bytes: usize,
    tick: u64,
}

/// A cache hit: a session holding the prompt's first `len` positions.
pub struct Hit {
    pub session: Session,
    pub len: usize,
}

impl PrefixCache {
    /// A cache of at most `capacity` bytes of key/value state, reusing prefixes in whole
    /// chunks of `chunk` positions (`capacity` 0: nothing is kept, prompts are still
    /// prefilled in chunks).
    pub fn new(capacity: usize, chunk: usize) -> PrefixCache {
        PrefixCache {
            chunk: chunk.max(1),
            capacity,
            entries: Vec::new(),
            bytes: 0,
            tick: 0,
        }
    }

    /// Positions per prefill chunk.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The end of the prefill chunk that starts at `done` in a prompt of `len` positions:
    /// the next multiple of the chunk size, or the prompt's end.
    pub fn next_chunk(&self, done: usize, len: usize) -> usize {
        ((done / self.chunk + 1) * self.chunk).min(len)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The longest cached prefix of `prompt`, in whole chunks, leaving at least one
    /// position of the prompt to run (its logits are what the first token is sampled from).
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Hit> {
        let room = prompt.len().saturating_sub(1);
        let (best, len) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let common = e
                    .tokens
                    .iter()
                    .zip(prompt)
                    .take_while(|(a, b)| a == b)
                    .count();
                (i, common.min(room) / self.chunk * self.chunk)
            })
            .max_by_key(|&(_, len)| len)?;
        if len == 0 {
            return None;
        }
        self.tick += 1;
        let e = &mut self.entries[best];
        e.used = self.tick;
        let session = e.session.fork(len)?;
        Some(Hit { session, len })
    }

    /// Keep the state of `prompt`, just prefilled in `session`, up to its last whole
    /// chunk (a prefix already held at that length or longer is only marked used).
    pub fn insert(&mut self, prompt: &[u32], session: &Session) {
        let len = prompt.len().min(session.position()) / self.chunk * self.chunk;
        if len == 0 || self.capacity == 0 {
            return;
        }
        let key = &prompt[..len];
        self.tick += 1;
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens.starts_with(key)) {
            e.used = self.tick;
            return;
        }
        let Some(fork) = session.fork(len) else {
            return;
        };
        let bytes = fork.cache_bytes();
        if bytes > self.capacity {
            return;
        }
        // Shorter prefixes of this one are covered by it now.
        self.entries.retain(|e| !key.starts_with(&e.tokens));
        self.entries.push(Entry {
            tokens: key.to_vec(),
            session: fork,
            bytes,
            used: self.tick,
        });
        self.bytes = self.entries.iter().map(|e| e.bytes).sum();
        while self.bytes > self.capacity {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let gone = self.entries.swap_remove(oldest);
            self.bytes -= gone.bytes;
        }
    }
}
