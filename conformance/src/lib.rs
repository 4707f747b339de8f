//! Model checking, TLC parity, trace replay and end-to-end suites.
pub mod fixtures;
pub mod test_user;
