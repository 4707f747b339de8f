//! Everything in Lazaret that touches the operating system.
