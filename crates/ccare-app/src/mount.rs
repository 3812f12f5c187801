//! Mounting a profile's plugins into a host (H-CFG-3, ACT-6). Which plugins and which
//! tables was decided at load (`config/plugins.rs`); this only finds each plugin's
//! instance and mounts it.

use ccare_agent::{Host, Plugin};
use ccare_core::Locale;

use crate::config::Profile;
use crate::error::AppError;

/// The plugin instances of this build. `care` is the context-care handle the front
/// ends keep for their samples (`/status`, `ccare context status`).
fn instances(care: &ccare_care::ContextCare, locale: Locale) -> Vec<Box<dyn Plugin>> {
    vec![
        Box::new(care.clone()),
        Box::new(ccare_watch::plugin::StreamWatchPlugin::default().with_locale(locale)),
        Box::new(ccare_time_context::TimeContext),
        Box::new(ccare_time_context::TimeContextInvariant),
    ]
}

/// Mounts every plugin `profile` names, in its order. Returns whether context care
/// was mounted.
pub(crate) fn mount_plugins(
    host: &Host,
    profile: &Profile,
    care: &ccare_care::ContextCare,
) -> Result<bool, AppError> {
    let known = instances(care, profile.locale);
    let mut care_mounted = false;
    for mount in &profile.plugins {
        let Some(plugin) = known.iter().find(|plugin| plugin.name() == mount.name) else {
            return Err(AppError::Mount(ccare_agent::HostError::UnknownPlugin(
                mount.name.clone(),
            )));
        };
        host.mount(plugin.as_ref(), &mount.config)?;
        care_mounted |= mount.name == "context-care";
    }
    Ok(care_mounted)
}
