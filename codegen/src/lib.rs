//! Parser for the state-table dialect of `protocol/*.tla` (see `protocol/README.md`).
