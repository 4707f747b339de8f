//! The sans-IO core of Lazaret. No syscalls, clocks or randomness.
pub mod ownership;
pub mod records;
pub mod terminal;
