//! The `Host`: what every agent of a process shares — the LLM layer, the session
//! engine, tools, hook chains, system-prompt sections — and the [`Plugin`] trait
//! through which features register into it (DESIGN.md §3, spec H-GEN-3).
//!
//! Everything a plugin registers is owned by its name; [`Host::unmount`] removes all
//! of it. Plugin config is the `[plugins.<name>]` table, validated by the plugin at
//! mount time; its errors are prefixed with the plugin name (H-CFG-3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ccare_core::kinds::EventTypeSpec;
use ccare_llm::Llm;
use ccare_session::{Registration, Registry, Sessions};
use parking_lot::RwLock;
use serde_json::Value;

use ccare_session::{ErasedProjection, Observer, Validator};

use crate::controls::{ControlSource, Controls};
use crate::domains::{Domains, PluginDomains};
use crate::hooks::{
    BoundaryContributor, Hooks, IdleHook, PreStepHook, Registered, RequestErrorHook, RequestGate,
    RequestHook, RequestSegment, StreamObserver, TurnStoppingHook,
};
use crate::mount_error::{MountError, ScopeError};
use crate::sections::{SectionList, SystemSections};
use crate::side::SideRequests;
use crate::tool::Tool;
use crate::toolbox::Toolbox;

/// A named part of the system prompt. Sections are joined by a blank line, ordered by
/// `order`, then name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemSection {
    /// The section's name, unique per host.
    pub name: String,
    /// Sort key.
    pub order: i32,
    /// The text.
    pub text: String,
}

/// A feature that registers into the host.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's name: its `[plugins.<name>]` table and the owner of its registrations.
    fn name(&self) -> &str;

    /// Validates `config` (the `[plugins.<name>]` table as JSON; an empty object when
    /// the table is empty) and registers what the plugin needs. A config error is
    /// [`MountError::Config`]; a refused registration converts with `?`.
    fn mount(&self, config: &Value, scope: &mut PluginScope<'_>) -> Result<(), MountError>;
}

/// What a plugin can register into while it mounts.
pub struct PluginScope<'a> {
    owner: String,
    host: &'a Host,
    registrations: Vec<Registration>,
}

impl PluginScope<'_> {
    /// The plugin's name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Registers an event type (plugin types are named `<plugin>/<name>`).
    pub fn event_type(&mut self, spec: EventTypeSpec) -> Result<(), ScopeError> {
        let registration = self.host.registry.register_event_type(spec)?;
        self.registrations.push(registration);
        Ok(())
    }

    /// Registers a tool; a name already taken is an error.
    pub fn tool(&mut self, tool: Arc<dyn Tool>) -> Result<(), ScopeError> {
        self.host.tools.write().insert(&self.owner, tool)?;
        Ok(())
    }

    /// Adds a system-prompt section.
    pub fn system_section(&mut self, section: SystemSection) {
        self.host.sections.write().push(Registered {
            owner: self.owner.clone(),
            hook: section,
        });
    }

    /// Adds a pre-step hook, innermost (after the hooks registered before it), or
    /// outermost (before every hook, newest outermost first).
    pub fn pre_step(&mut self, hook: Arc<dyn PreStepHook>, outermost: bool) {
        let mut hooks = self.host.hooks.write();
        let registered = Registered {
            owner: self.owner.clone(),
            hook,
        };
        if outermost {
            hooks.pre_step.insert(0, registered);
            hooks.outermost += 1;
        } else {
            hooks.pre_step.push(registered);
        }
    }

    /// Adds a request hook.
    pub fn request(&mut self, hook: Arc<dyn RequestHook>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .request
            .push(Registered { owner, hook });
    }

    /// Adds a stream observer.
    pub fn stream(&mut self, hook: Arc<dyn StreamObserver>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .stream
            .push(Registered { owner, hook });
    }

    /// Adds a request-error hook.
    pub fn request_error(&mut self, hook: Arc<dyn RequestErrorHook>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .request_error
            .push(Registered { owner, hook });
    }

    /// Adds a turn-stopping hook.
    pub fn turn_stopping(&mut self, hook: Arc<dyn TurnStoppingHook>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .turn_stopping
            .push(Registered { owner, hook });
    }

    /// Adds a boundary-notice contributor; lower priorities run first.
    pub fn boundary(&mut self, contributor: Arc<dyn BoundaryContributor>, priority: i32) {
        let owner = self.owner.clone();
        let mut hooks = self.host.hooks.write();
        let position = hooks
            .boundary
            .iter()
            .position(|(existing, _)| *existing > priority)
            .unwrap_or(hooks.boundary.len());
        hooks.boundary.insert(
            position,
            (
                priority,
                Registered {
                    owner,
                    hook: contributor,
                },
            ),
        );
    }

    /// Adds a request segment (request-only messages).
    pub fn request_segment(&mut self, segment: Arc<dyn RequestSegment>) {
        let owner = self.owner.clone();
        self.host.hooks.write().segments.push(Registered {
            owner,
            hook: segment,
        });
    }

    /// Adds a request gate, which may refuse a request before it leaves.
    pub fn request_gate(&mut self, gate: Arc<dyn RequestGate>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .gates
            .push(Registered { owner, hook: gate });
    }

    /// Registers a projection of session events (H-PROJ).
    pub fn projection(&mut self, projection: Arc<dyn ErasedProjection>) -> Result<(), ScopeError> {
        let registration = self.host.registry.register_projection(projection)?;
        self.registrations.push(registration);
        Ok(())
    }

    /// Registers a pre-commit validator (H-VAL).
    pub fn validator(&mut self, validator: Arc<dyn Validator>) {
        let registration = self.host.registry.register_validator(validator);
        self.registrations.push(registration);
    }

    /// Registers a post-commit observer (H-OBS).
    pub fn observer(&mut self, observer: Arc<dyn Observer>) {
        let registration = self.host.registry.register_observer(observer);
        self.registrations.push(registration);
    }

    /// Opens this plugin's storage domains (H-DOM-1) later, from async code; every
    /// domain opened through it is closed when the plugin unmounts.
    pub fn domains(&self) -> PluginDomains {
        self.host.domains.for_owner(&self.owner)
    }

    /// A token cancelled when this plugin is unmounted: work it started (a summary
    /// call, a queued action) stops at once (context-care CC-SER-1).
    pub fn lifetime(&self) -> ccare_llm::CancellationToken {
        self.host
            .lifetimes
            .read()
            .get(&self.owner)
            .cloned()
            .unwrap_or_default()
    }

    /// The host's LLM layer, for plugins that make their own calls (e.g. context-care's
    /// summaries, purpose `compaction`).
    pub fn llm(&self) -> Arc<Llm> {
        Arc::clone(&self.host.llm)
    }

    /// A live, read-only view of the host's system-prompt sections (every owner's).
    pub fn system_sections(&self) -> SystemSections {
        SystemSections::new(Arc::clone(&self.host.sections))
    }

    /// A handle for this plugin's own model calls (e.g. context-care's summaries):
    /// they run the host's request hooks and the segments serving their purpose, as
    /// registered at the time of each call (MP-3).
    pub fn side_requests(&self) -> SideRequests {
        self.host.side_requests()
    }

    /// The host's session engine, for plugins that read sessions outside a turn (e.g.
    /// context-care's management routes): `Sessions::load` reads and audits without
    /// repairing or appending, so it needs no lease.
    pub fn sessions(&self) -> Arc<Sessions> {
        Arc::clone(&self.host.sessions)
    }

    /// The host's per-session rule controls (RC-*, CC-CTL), to consult at run time.
    pub fn controls(&self) -> Controls {
        self.host.controls.clone()
    }

    /// The host's session driver slot, for a route that must append to a session
    /// through its driver (read it per request: the front end installs the driver
    /// after plugins mount).
    pub fn session_driver(&self) -> crate::driver::DriverSlot {
        self.host.driver.clone()
    }

    /// Registers a controls source owned by this plugin (RC-1); removed on unmount.
    pub fn control_source(&mut self, mut source: ControlSource) -> Result<(), ScopeError> {
        source.plugin = Some(self.owner.clone());
        let source_id = source.source_id.clone();
        self.host.controls.register(source)?;
        self.host.control_sources.write().push(Registered {
            owner: self.owner.clone(),
            hook: source_id,
        });
        Ok(())
    }

    /// Adds a tool gate: it sees every tool call before it runs (and may answer it with
    /// an error instead) and every result after it is logged.
    pub fn tool_gate(&mut self, gate: Arc<dyn crate::hooks::ToolGate>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .tool_gates
            .push(Registered { owner, hook: gate });
    }

    /// Registers an HTTP route owned by this plugin (H-HTTP-1); a path already
    /// registered is `ROUTE_CONFLICT`. Removed on unmount.
    pub fn route(&mut self, spec: crate::routes::RouteSpec) -> Result<(), ScopeError> {
        self.host.routes.register(&self.owner, spec)?;
        Ok(())
    }

    /// Adds an idle hook.
    pub fn idle(&mut self, hook: Arc<dyn IdleHook>) {
        let owner = self.owner.clone();
        self.host
            .hooks
            .write()
            .idle
            .push(Registered { owner, hook });
    }
}

/// A host could not mount a plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The plugin refused its config or could not register; its error is prefixed
    /// with the plugin name (H-CFG-3).
    #[error("{plugin}: {error}")]
    Plugin {
        /// The plugin.
        plugin: String,
        /// Why.
        error: MountError,
    },
    /// A `[plugins.<name>]` table names no known plugin.
    #[error("plugins.{0}: no such plugin")]
    UnknownPlugin(String),
    /// The plugin is already mounted.
    #[error("{0}: already mounted")]
    AlreadyMounted(String),
}

/// What every agent of a process shares.
pub struct Host {
    pub(crate) llm: Arc<Llm>,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) tools: RwLock<Toolbox>,
    /// Shared with every [`crate::SideRequests`] handle, which reads it per call.
    pub(crate) hooks: Arc<RwLock<Hooks>>,
    pub(crate) sections: SectionList,
    /// The locale of the installed base instructions (`None`: none installed), so the
    /// base section can be rendered again for an agent that hides tools.
    pub(crate) base_locale: RwLock<Option<ccare_core::Locale>>,
    pub(crate) domains: Domains,
    pub(crate) controls: Controls,
    /// The agents' durable inbox (the `agent_inbox` domain, ACT-2).
    pub(crate) inbox: crate::inbox::InboxStore,
    /// The HTTP routes the host and its plugins registered (H-HTTP-1).
    routes: crate::routes::Routes,
    /// The front end's session driver, for routes that append (CC-EXT-3).
    driver: crate::driver::DriverSlot,
    control_sources: RwLock<Vec<Registered<String>>>,
    mounted: RwLock<BTreeMap<String, Vec<Registration>>>,
    /// Per mounted plugin: cancelled when it is unmounted.
    lifetimes: RwLock<BTreeMap<String, ccare_llm::CancellationToken>>,
    /// The callers' own keys of the sessions whose agents run with one (GW-1), for
    /// their side requests.
    pub(crate) credentials: crate::credentials::SessionCredentials,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("tools", &self.tools.read().names())
            .field("mounted", &self.mounted.read().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// A host over an LLM layer and a session engine. `registry` must be the one the
    /// session engine was built with, so plugin event types and validators apply.
    pub fn new(llm: Arc<Llm>, sessions: Arc<Sessions>, registry: Arc<Registry>) -> Self {
        let store = Arc::clone(sessions.store());
        Self {
            llm,
            sessions,
            registry,
            tools: RwLock::new(Toolbox::default()),
            hooks: Arc::new(RwLock::new(Hooks::default())),
            sections: Arc::new(RwLock::new(Vec::new())),
            base_locale: RwLock::new(None),
            domains: Domains::new(Arc::clone(&store)),
            controls: Controls::new(store),
            inbox: crate::inbox::InboxStore::default(),
            routes: crate::routes::Routes::default(),
            driver: crate::driver::DriverSlot::default(),
            control_sources: RwLock::new(Vec::new()),
            mounted: RwLock::new(BTreeMap::new()),
            lifetimes: RwLock::new(BTreeMap::new()),
            credentials: crate::credentials::SessionCredentials::default(),
        }
    }

    /// Installs the front end's session driver (the registry of agent actors), which
    /// routes that append go through (CC-EXT-3).
    pub fn set_session_driver(&self, driver: Arc<dyn crate::driver::SessionDriver>) {
        self.driver.set(driver);
    }

    /// The LLM layer.
    pub fn llm(&self) -> &Arc<Llm> {
        &self.llm
    }

    /// A handle for model calls made outside a step's conversation request, shaped by
    /// the request hooks and segments (see [`SideRequests`]).
    pub fn side_requests(&self) -> SideRequests {
        SideRequests::new(&self.hooks, Arc::clone(&self.llm), self.credentials.clone())
    }

    /// The session engine.
    pub fn sessions(&self) -> &Arc<Sessions> {
        &self.sessions
    }

    /// The storage domains plugins keep their state in (H-DOM).
    pub fn domains(&self) -> &Domains {
        &self.domains
    }

    /// The per-session rule controls every plugin consults (RC-*, CC-CTL).
    pub fn controls(&self) -> &Controls {
        &self.controls
    }

    /// The HTTP route table (H-HTTP-1): plugins register into it while they mount,
    /// the server registers its own routes (owner `server`) and serves them all.
    pub fn routes(&self) -> &crate::routes::Routes {
        &self.routes
    }

    /// Registers a host tool (owner `host`).
    pub fn add_tool(&self, tool: Arc<dyn Tool>) -> Result<(), String> {
        self.tools
            .write()
            .insert("host", tool)
            .map_err(|error| error.to_string())
    }

    /// The names of the registered tools, in registration order.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools.read().names()
    }

    /// Adds a system-prompt section owned by the host.
    pub fn add_system_section(&self, section: SystemSection) {
        self.sections.write().push(Registered {
            owner: "host".to_owned(),
            hook: section,
        });
    }

    /// Mounts a plugin with its config table.
    pub fn mount(&self, plugin: &dyn Plugin, config: &Value) -> Result<(), HostError> {
        let name = plugin.name().to_owned();
        if self.mounted.read().contains_key(&name) {
            return Err(HostError::AlreadyMounted(name));
        }
        self.lifetimes
            .write()
            .insert(name.clone(), ccare_llm::CancellationToken::new());
        let mut scope = PluginScope {
            owner: name.clone(),
            host: self,
            registrations: Vec::new(),
        };
        let outcome = plugin.mount(config, &mut scope);
        let registrations = scope.registrations;
        self.mounted.write().insert(name.clone(), registrations);
        if let Err(error) = outcome {
            self.unmount(&name);
            return Err(HostError::Plugin {
                plugin: name,
                error,
            });
        }
        Ok(())
    }

    /// Removes everything a plugin registered: tools, hooks, sections, event types.
    /// Returns whether it was mounted.
    pub fn unmount(&self, name: &str) -> bool {
        let Some(registrations) = self.mounted.write().remove(name) else {
            return false;
        };
        if let Some(lifetime) = self.lifetimes.write().remove(name) {
            lifetime.cancel();
        }
        for registration in registrations {
            self.registry.remove(registration);
        }
        self.tools.write().remove_owner(name);
        self.hooks.write().remove_owner(name);
        self.sections
            .write()
            .retain(|section| section.owner != name);
        self.domains.close_owner(name);
        self.routes.remove_owner(name);
        self.control_sources.write().retain(|source| {
            if source.owner == name {
                self.controls.unregister(&source.hook);
                false
            } else {
                true
            }
        });
        true
    }

    /// The plugins mounted, by name.
    pub fn mounted(&self) -> Vec<String> {
        self.mounted.read().keys().cloned().collect()
    }

    /// The system prompt of an agent that hides the host tools `hidden`
    /// ([`crate::AgentOptions::hidden_tools`]): [`Host::system_prompt`] with the base
    /// instructions' tool line naming only the host tools the agent offers. When it
    /// offers none of them but the caller declared tools for the turn
    /// (`caller_tools`), the line is left out rather than saying there are no tools.
    pub fn system_prompt_hiding(
        &self,
        hidden: &BTreeSet<String>,
        caller_tools: bool,
    ) -> Option<String> {
        let locale = match *self.base_locale.read() {
            Some(locale) if !hidden.is_empty() => locale,
            Some(locale) if caller_tools && self.tools.read().is_empty() => locale,
            _ => return self.system_prompt(),
        };
        let offered: Vec<String> = self
            .tool_names()
            .into_iter()
            .filter(|name| !hidden.contains(name))
            .collect();
        self.joined_sections(|section| {
            if section.name == crate::instructions::BASE_SECTION {
                crate::instructions::base_text(locale, &offered, caller_tools)
            } else {
                section.text
            }
        })
    }

    /// The system prompt: sections by `order` then name, joined by a blank line.
    pub fn system_prompt(&self) -> Option<String> {
        self.joined_sections(|section| section.text)
    }

    /// The sections by `order` then name, each as `text_of` writes it, joined by a
    /// blank line; `None` when there is none.
    fn joined_sections(&self, text_of: impl FnMut(SystemSection) -> String) -> Option<String> {
        let sections = crate::sections::sorted(&self.sections);
        if sections.is_empty() {
            return None;
        }
        Some(
            sections
                .into_iter()
                .map(text_of)
                .collect::<Vec<_>>()
                .join("\n\n"),
        )
    }
}
