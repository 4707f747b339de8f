//! redb table definitions. Keys are fixed-width integers; values are postcard
//! encodings of the runtime records (which repeat their key fields, checked
//! on read).
use redb::TableDefinition;

pub const METADATA_KEY: &str = "metadata";
pub const DOMAIN_KEY: u8 = 0;

pub const METADATA: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("store_metadata");
pub const DOMAIN: TableDefinition<'_, u8, &[u8]> = TableDefinition::new("domain");
/// generation_id -> Generation
pub const GENERATIONS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("generations");
/// (generation_id, role key) -> Participant
pub const PARTICIPANTS: TableDefinition<'_, (u64, u8), &[u8]> =
    TableDefinition::new("participants");
/// (generation_id, session_id as big-endian u128) -> Session
pub const SESSIONS: TableDefinition<'_, (u64, u128), &[u8]> = TableDefinition::new("sessions");
/// (generation_id, session_id as big-endian u128) -> SessionTerminal
pub const TERMINALS: TableDefinition<'_, (u64, u128), &[u8]> =
    TableDefinition::new("session_terminals");
/// generation_id -> Mailbox
pub const MAILBOXES: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("mailboxes");
