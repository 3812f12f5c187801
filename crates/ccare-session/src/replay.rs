//! Rebuilding a [`SessionLog`] from stored or imported envelopes, with the audit of
//! H-VAL-3: the same checks an append makes, in the same order, event by event.

use std::sync::Arc;

use ccare_core::{Event, SessionId};

use crate::error::{AppendError, LoadError, Violation};
use crate::log::SessionLog;
use crate::registry::Registry;
use crate::validate::{Validator, run_check};

/// How a load or import treats validator violations (`[validators]`, H-VAL-3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadPolicy {
    /// Violations are fatal (`validators.strict_load`).
    pub strict: bool,
    /// Only these validators run, when set (`validators.allow`).
    pub allow: Option<Vec<String>>,
    /// These validators never run (`validators.deny`).
    pub deny: Vec<String>,
}

impl LoadPolicy {
    fn selects(&self, validator: &dyn Validator) -> bool {
        self.runs(validator.name())
    }

    /// Whether the validator named `name` runs in a load or import audit: it is in
    /// `allow` (or `allow` is unset) and not in `deny` (deny wins).
    pub fn runs(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|allowed| allowed == name));
        allowed && !self.deny.iter().any(|denied| denied == name)
    }

    /// Checks that every name in `allow` and `deny` is one of `known` (the validators
    /// the registry holds, see [`Registry::validator_names`]): a misspelt name would
    /// otherwise silently turn an audit off, or keep it on.
    pub fn check_names(&self, known: &[String]) -> Result<(), UnknownValidator> {
        let lists = [
            ("allow", self.allow.as_deref().unwrap_or_default()),
            ("deny", self.deny.as_slice()),
        ];
        for (list, names) in lists {
            if let Some(name) = names.iter().find(|name| !known.contains(name)) {
                return Err(UnknownValidator {
                    list,
                    name: name.clone(),
                    known: known.to_vec(),
                });
            }
        }
        Ok(())
    }
}

/// A `validators.allow` / `validators.deny` entry that names no registered validator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "validators.{list}: unknown validator {name:?} (known: {})",
    known.join(", ")
)]
pub struct UnknownValidator {
    /// `allow` or `deny`.
    pub list: &'static str,
    /// The unknown name.
    pub name: String,
    /// The validators that exist, in registration order.
    pub known: Vec<String>,
}

/// A replayed log and the violations its audit found.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The rebuilt log.
    pub log: SessionLog,
    /// Validator objections, in seq order (fatal only under `strict`).
    pub violations: Vec<Violation>,
}

/// Replays `rows` (envelope JSON texts, in seq order from 0).
pub fn replay<I>(
    session: &SessionId,
    rows: I,
    registry: &Registry,
    policy: &LoadPolicy,
) -> Result<Replayed, LoadError>
where
    I: IntoIterator,
    I::Item: Into<Box<str>>,
{
    let validators: Vec<Arc<dyn Validator>> = registry
        .validators()
        .into_iter()
        .filter(|validator| policy.selects(validator.as_ref()))
        .collect();
    let mut log = SessionLog::new(session.clone());
    let mut violations = Vec::new();
    for row in rows {
        let position = log.head();
        let event = Event::parse(row).map_err(|error| LoadError::BadEvent {
            session: session.clone(),
            seq: position,
            error,
        })?;
        if event.seq() != position {
            return Err(LoadError::SeqMismatch {
                session: session.clone(),
                position,
                found: event.seq(),
            });
        }
        let candidate = log.prepare(event, registry).map_err(|error| match error {
            AppendError::UnregisteredType { kind, .. } => LoadError::UnknownRequired {
                session: session.clone(),
                seq: position,
                kind,
            },
            other => LoadError::Invalid {
                session: session.clone(),
                seq: position,
                error: Box::new(other),
            },
        })?;
        for validator in &validators {
            let Err(veto) = run_check(validator.as_ref(), &log, &candidate) else {
                continue;
            };
            violations.push(Violation {
                seq: position,
                validator: validator.name().to_owned(),
                message: veto.message,
            });
        }
        log.apply(candidate);
    }
    if policy.strict && !violations.is_empty() {
        return Err(LoadError::Violations {
            session: session.clone(),
            violations,
        });
    }
    Ok(Replayed { log, violations })
}
