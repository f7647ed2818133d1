//! The VINDEX3 container (seed 002).
