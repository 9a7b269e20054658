//! The sync engine: walks a schedule's calls page by page into the warehouse.

pub mod cursor;
