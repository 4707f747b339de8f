//! The sans-IO core of Lazaret. No syscalls, clocks or randomness.

pub mod core;
pub mod replay;
pub mod simulate;
pub mod trace;
