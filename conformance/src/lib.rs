//! Model checking, TLC parity, trace replay and end-to-end suites.
pub mod test_user;
