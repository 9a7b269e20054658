//! Scaffolding: logging set-up is being built.
