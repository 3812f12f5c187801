//! What the host and its plugins register with the session engine: event types,
//! validators, observers and projections (spec H-EVT-1, H-VAL, H-OBS, H-PROJ).
//!
//! Each registration returns a [`Registration`] handle; [`Registry::remove`] takes it
//! back, so a plugin that is removed leaves nothing behind.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ccare_core::kinds::{EventTypeSpec, HOST_EVENT_TYPES};
use parking_lot::RwLock;

use crate::observe::Observer;
use crate::projection::ErasedProjection;
use crate::validate::{Validator, builtin_validators};

/// A handle to one registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Registration(u64);

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The event type name is already registered.
    #[error("event type '{0}' is already registered")]
    DuplicateEventType(String),
    /// The projection key is already registered.
    #[error("projection '{0}' is already registered")]
    DuplicateProjection(String),
}

impl RegistryError {
    /// The error code.
    pub fn code(&self) -> &'static str {
        match self {
            RegistryError::DuplicateEventType(_) => "DUPLICATE_EVENT_TYPE",
            RegistryError::DuplicateProjection(_) => "DUPLICATE_PROJECTION",
        }
    }
}

/// Registered validators or observers in registration order, shared copy-on-write:
/// every append reads them, which then costs one reference count, not a new list.
type Listed<T> = Arc<Vec<(Registration, Arc<T>)>>;

/// A snapshot of the validators or observers, in registration order
/// ([`Registry::validators`], [`Registry::observers`]).
pub struct Members<T: ?Sized>(Listed<T>);

impl<T: ?Sized> Members<T> {
    /// The members, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<T>> {
        self.0.iter().map(|(_, member)| member)
    }
}

/// The shared registry every session of a host consults.
#[derive(Default)]
pub struct Registry {
    next_id: AtomicU64,
    event_types: RwLock<HashMap<String, (Registration, EventTypeSpec)>>,
    validators: RwLock<Listed<dyn Validator>>,
    observers: RwLock<Listed<dyn Observer>>,
    projections: RwLock<Vec<(Registration, Arc<dyn ErasedProjection>)>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Registry")
            .field("event_types", &self.event_types.read().len())
            .field("validators", &self.validators.read().len())
            .field("observers", &self.observers.read().len())
            .field("projections", &self.projections.read().len())
            .finish()
    }
}

impl Registry {
    /// An empty registry: no types, no validators.
    pub fn empty() -> Self {
        Self::default()
    }

    /// A registry with the host's event types and built-in validators (H-VAL-4).
    pub fn with_host_defaults() -> Self {
        let registry = Self::default();
        for spec in HOST_EVENT_TYPES {
            // The host types are distinct constants; a duplicate is impossible here.
            let _ = registry.register_event_type(spec.clone());
        }
        for validator in builtin_validators() {
            registry.register_validator(validator);
        }
        registry
    }

    fn next_registration(&self) -> Registration {
        Registration(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers an event type.
    pub fn register_event_type(&self, spec: EventTypeSpec) -> Result<Registration, RegistryError> {
        let mut types = self.event_types.write();
        if types.contains_key(spec.name.as_ref()) {
            return Err(RegistryError::DuplicateEventType(spec.name.into_owned()));
        }
        let registration = self.next_registration();
        types.insert(spec.name.to_string(), (registration, spec));
        Ok(registration)
    }

    /// Registers a validator; validators run in registration order.
    pub fn register_validator(&self, validator: Arc<dyn Validator>) -> Registration {
        let registration = self.next_registration();
        Arc::make_mut(&mut self.validators.write()).push((registration, validator));
        registration
    }

    /// Registers a synchronous observer.
    pub fn register_observer(&self, observer: Arc<dyn Observer>) -> Registration {
        let registration = self.next_registration();
        Arc::make_mut(&mut self.observers.write()).push((registration, observer));
        registration
    }

    /// Registers a projection.
    pub fn register_projection(
        &self,
        projection: Arc<dyn ErasedProjection>,
    ) -> Result<Registration, RegistryError> {
        let mut projections = self.projections.write();
        if projections
            .iter()
            .any(|(_, existing)| existing.key() == projection.key())
        {
            return Err(RegistryError::DuplicateProjection(
                projection.key().to_owned(),
            ));
        }
        let registration = self.next_registration();
        projections.push((registration, projection));
        Ok(registration)
    }

    /// Removes whatever `registration` added. Returns whether something was removed.
    pub fn remove(&self, registration: Registration) -> bool {
        let before = self.len();
        self.event_types
            .write()
            .retain(|_, (id, _)| *id != registration);
        Arc::make_mut(&mut self.validators.write()).retain(|(id, _)| *id != registration);
        Arc::make_mut(&mut self.observers.write()).retain(|(id, _)| *id != registration);
        self.projections
            .write()
            .retain(|(id, _)| *id != registration);
        self.len() != before
    }

    fn len(&self) -> usize {
        self.event_types.read().len()
            + self.validators.read().len()
            + self.observers.read().len()
            + self.projections.read().len()
    }

    /// The spec of a registered type.
    pub fn event_type(&self, name: &str) -> Option<EventTypeSpec> {
        self.event_types
            .read()
            .get(name)
            .map(|(_, spec)| spec.clone())
    }

    /// Whether `name` is a registered type.
    pub fn knows(&self, name: &str) -> bool {
        self.event_types.read().contains_key(name)
    }

    /// The validators, in order.
    pub fn validators(&self) -> Members<dyn Validator> {
        Members(self.validators.read().clone())
    }

    /// The names of the validators, in order (what `validators.allow` and
    /// `validators.deny` may name).
    pub fn validator_names(&self) -> Vec<String> {
        self.validators
            .read()
            .iter()
            .map(|(_, validator)| validator.name().to_owned())
            .collect()
    }

    /// The observers, in order.
    pub fn observers(&self) -> Members<dyn Observer> {
        Members(self.observers.read().clone())
    }

    /// The projection registered under `key`.
    pub fn projection(&self, key: &str) -> Option<Arc<dyn ErasedProjection>> {
        self.projections
            .read()
            .iter()
            .find(|(_, projection)| projection.key() == key)
            .map(|(_, projection)| projection.clone())
    }

    /// Every projection, in order.
    pub fn projections(&self) -> Vec<Arc<dyn ErasedProjection>> {
        self.projections
            .read()
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }
}
