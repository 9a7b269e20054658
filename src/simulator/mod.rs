//! Scaffolding: the simulator module is being built.
