//! Shared by the benchmarks: the reference every figure is compared with.

pub mod reference;
