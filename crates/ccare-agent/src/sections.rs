//! The system-prompt sections of a host, shared: the host writes them, and a plugin
//! holds a [`SystemSections`] reader to see them as the next request will (e.g.
//! context-care's `ccare context status` shows each instruction section as its own
//! category).

use std::sync::Arc;

use parking_lot::RwLock;

use crate::hooks::Registered;
use crate::host::SystemSection;

/// The registered sections, shared between the host and its readers.
pub(crate) type SectionList = Arc<RwLock<Vec<Registered<SystemSection>>>>;

/// A read-only view of a host's system-prompt sections, live: it sees sections added
/// or removed after it was taken.
#[derive(Clone)]
pub struct SystemSections {
    sections: SectionList,
}

impl std::fmt::Debug for SystemSections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.snapshot()).finish()
    }
}

impl SystemSections {
    pub(crate) fn new(sections: SectionList) -> Self {
        Self { sections }
    }

    /// The sections now, in prompt order: by `order`, then name.
    pub fn snapshot(&self) -> Vec<SystemSection> {
        sorted(&self.sections)
    }
}

/// The sections of `list` in prompt order: by `order`, then name.
pub(crate) fn sorted(list: &SectionList) -> Vec<SystemSection> {
    let mut sections: Vec<SystemSection> = list
        .read()
        .iter()
        .map(|section| section.hook.clone())
        .collect();
    sections.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name)));
    sections
}
