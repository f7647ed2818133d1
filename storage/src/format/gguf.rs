//! GGUF v3 (and v2 read-only): mmap reader with hostile-input limits, and writer.
