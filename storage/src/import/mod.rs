//! Importers: judge a source's architecture once and produce a [`crate::Model`].
