//! Named models and the local model cache (`LQL_HOME`, default `~/.cache/lql/models`).
