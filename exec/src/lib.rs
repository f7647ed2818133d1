//! # lql-exec: runs a storage::Model — operation plan, CPU backend, tokenizer, sampling.
