//! Confined filesystem authority (spec 3.2 "Path resolution produces confined
//! path authority"): kernel calls behind [`ConfinedSys`], retained-ancestor
//! path plans and component-wise root creation.
mod error;
mod plan;
mod recording;
mod root;
mod sys;

pub(crate) use error::open_problem;
pub use error::ConfinedError;
pub(crate) use plan::{confined_resolve, resolve_ancestors};
pub use plan::{ConfinedPathPlan, OpenedObject};
pub use recording::{RecordedCall, RecordingSys};
pub use root::RootHandle;
pub use sys::{ConfinedSys, FileKind, FileStat, Identity, RealSys, UserIds};
