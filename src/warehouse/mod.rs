//! Scaffolding: the warehouse module is being built.
