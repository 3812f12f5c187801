//! Rebuilding a [`SessionLog`] from stored or imported envelopes, with the audit of
//! H-VAL-3: the same checks an append makes, in the same order, event by event.

use std::sync::{Arc, mpsc};

use ccare_core::{Event, EventError, SessionId};

use crate::decode::{Decoded, decode};
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
        .iter()
        .filter(|validator| policy.selects(validator.as_ref()))
        .cloned()
        .collect();
    let mut log = SessionLog::new(session.clone());
    let mut violations = Vec::new();
    let mut step = |parsed: Parsed| -> Result<(), LoadError> {
        let position = log.head();
        let event = parsed.event.map_err(|error| LoadError::BadEvent {
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
        let candidate = log
            .prepare_decoded(event, parsed.decoded, registry)
            .map_err(|error| match error {
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
        Ok(())
    };
    let rows: Vec<Box<str>> = rows.into_iter().map(Into::into).collect();
    pipelined(rows, registry, &mut step)?;
    if policy.strict && !violations.is_empty() {
        return Err(LoadError::Violations {
            session: session.clone(),
            violations,
        });
    }
    Ok(Replayed { log, violations })
}

/// From how many rows a replay parses and decodes on [`WORKERS`] other threads.
const PIPELINE_FROM: usize = 2048;

/// Rows a parsing thread hands over at a time.
const BATCH: usize = 256;

/// How many threads parse and decode a long log.
const WORKERS: usize = 2;

/// One row parsed and, when its type is registered, decoded: the part of a replay that
/// does not depend on the events before it.
struct Parsed {
    event: Result<Event, EventError>,
    /// `None` when the row did not parse or its type is not registered.
    decoded: Option<Result<Decoded, EventError>>,
}

fn parse_row(raw: Box<str>, registry: &Registry) -> Parsed {
    match Event::parse(raw) {
        Ok(event) => {
            let decoded = registry.event_type(event.kind()).map(|_| decode(&event));
            Parsed {
                event: Ok(event),
                decoded,
            }
        }
        Err(error) => Parsed {
            event: Err(error),
            decoded: None,
        },
    }
}

/// Feeds `rows`, parsed and decoded, to `step` in order (issue 14 target 5). A long log
/// is cut into batches that [`WORKERS`] threads parse and decode in turn (batch `i` on
/// thread `i % WORKERS`) while `step` applies the batches before, taking them back in
/// batch order: the same rows reach `step` in the same order with the same results, so
/// a replay's outcome (its first error included) is the sequential one. `step`'s first
/// error stops the threads at their next batch.
fn pipelined<E>(
    rows: Vec<Box<str>>,
    registry: &Registry,
    step: &mut dyn FnMut(Parsed) -> Result<(), E>,
) -> Result<(), E> {
    if rows.len() < PIPELINE_FROM {
        return rows
            .into_iter()
            .try_for_each(|raw| step(parse_row(raw, registry)));
    }
    let mut batches: Vec<Vec<Box<str>>> = Vec::with_capacity(rows.len() / BATCH + 1);
    let mut rows = rows.into_iter();
    loop {
        let batch: Vec<Box<str>> = rows.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        batches.push(batch);
    }
    let total = batches.len();
    std::thread::scope(|scope| {
        let mut shares = Vec::with_capacity(WORKERS);
        let mut parsed = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            let (share_in, share_out) = mpsc::sync_channel::<Vec<Vec<Box<str>>>>(1);
            let (sender, receiver) = mpsc::sync_channel::<Vec<Parsed>>(4);
            let spawned = std::thread::Builder::new()
                .name("ccare-replay".into())
                .spawn_scoped(scope, move || {
                    let Ok(share) = share_out.recv() else {
                        return;
                    };
                    for batch in share {
                        let batch = batch
                            .into_iter()
                            .map(|raw| parse_row(raw, registry))
                            .collect();
                        if sender.send(batch).is_err() {
                            // The replay stopped: nothing waits for the rest.
                            return;
                        }
                    }
                });
            if spawned.is_err() {
                // Too few threads: the ones started get no share and end; parse here.
                drop(shares);
                return batches
                    .into_iter()
                    .flatten()
                    .try_for_each(|raw| step(parse_row(raw, registry)));
            }
            shares.push((share_in, Vec::new()));
            parsed.push(receiver);
        }
        for (index, batch) in batches.into_iter().enumerate() {
            if let Some((_, share)) = shares.get_mut(index % WORKERS) {
                share.push(batch);
            }
        }
        for (share_in, share) in shares {
            // A thread that cannot take its share has ended; its batches never come
            // and the loop below stops short, which only a panic (re-raised when the
            // scope ends) can cause.
            let _ = share_in.send(share);
        }
        for index in 0..total {
            let Some(Ok(batch)) = parsed.get(index % WORKERS).map(mpsc::Receiver::recv) else {
                break;
            };
            for row in batch {
                step(row)?;
            }
        }
        Ok(())
    })
}
