//! Matching a request path against the route table (H-HTTP-1).
//!
//! The table is compiled into segment lists once per [`Routes::generation`] and
//! matched by a linear scan (a host has tens of routes, not thousands). When several
//! routes match, the most specific wins: an exact route before a prefix route; among
//! exact routes, a literal segment before a `{param}` at the first position where they
//! differ; among prefix routes, the longer prefix. The table's own conflict check
//! (same shape → `ROUTE_CONFLICT`) guarantees the winner is unique.

use std::collections::BTreeMap;
use std::sync::Arc;

use ccare_agent::routes::{RouteEntry, Routes};
use parking_lot::RwLock;

/// One segment of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Matches exactly this text.
    Literal(String),
    /// Matches any one non-empty segment, passed to the handler under this name.
    Param(String),
}

/// A route ready to match.
#[derive(Debug, Clone)]
struct Compiled {
    /// Shared with every match (a route's docs are not copied per request).
    entry: Arc<RouteEntry>,
    segments: Vec<Segment>,
    prefix: bool,
}

/// A route a path matched, with what the path filled in.
#[derive(Debug, Clone)]
pub(crate) struct Matched {
    /// The route.
    pub(crate) entry: Arc<RouteEntry>,
    /// The `{name}` parameters.
    pub(crate) params: BTreeMap<String, String>,
    /// For a prefix route, the path after the prefix.
    pub(crate) rest: String,
}

/// A compiled snapshot of the table at one generation.
#[derive(Debug, Default)]
struct Snapshot {
    generation: u64,
    routes: Vec<Compiled>,
}

/// The live table and its compiled snapshot, recompiled when the table changes.
#[derive(Debug)]
pub(crate) struct Table {
    routes: Routes,
    snapshot: RwLock<Arc<Snapshot>>,
}

/// The segments of a path or pattern without its leading `/`: `/` is `[""]`.
fn split(path: &str) -> Vec<&str> {
    path.strip_prefix('/').unwrap_or(path).split('/').collect()
}

fn compile(entry: RouteEntry) -> Compiled {
    let pattern = entry.spec.path.pattern().to_owned();
    let prefix = entry.spec.path.is_prefix();
    let body = if prefix {
        pattern.strip_suffix('/').unwrap_or(&pattern)
    } else {
        &pattern
    };
    let segments = if prefix && body.is_empty() {
        Vec::new()
    } else {
        split(body)
            .into_iter()
            .map(|segment| {
                match segment
                    .strip_prefix('{')
                    .and_then(|name| name.strip_suffix('}'))
                {
                    Some(name) => Segment::Param(name.to_owned()),
                    None => Segment::Literal(segment.to_owned()),
                }
            })
            .collect()
    };
    Compiled {
        entry: Arc::new(entry),
        segments,
        prefix,
    }
}

impl Compiled {
    /// The parameters and rest when `path` (split) matches.
    fn matches(&self, path: &[&str]) -> Option<(BTreeMap<String, String>, String)> {
        let fits = if self.prefix {
            path.len() > self.segments.len()
        } else {
            path.len() == self.segments.len()
        };
        if !fits {
            return None;
        }
        let mut params = BTreeMap::new();
        for (segment, text) in self.segments.iter().zip(path) {
            match segment {
                Segment::Literal(literal) if literal == text => {}
                Segment::Param(name) if !text.is_empty() => {
                    params.insert(name.clone(), (*text).to_owned());
                }
                _ => return None,
            }
        }
        let rest = if self.prefix {
            path[self.segments.len()..].join("/")
        } else {
            String::new()
        };
        Some((params, rest))
    }

    /// Orders candidates: `Less` is more specific.
    fn specificity(&self, other: &Compiled) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.prefix, other.prefix) {
            (false, true) => return Ordering::Less,
            (true, false) => return Ordering::Greater,
            (true, true) if self.segments.len() != other.segments.len() => {
                return other.segments.len().cmp(&self.segments.len());
            }
            _ => {}
        }
        for (mine, theirs) in self.segments.iter().zip(&other.segments) {
            match (mine, theirs) {
                (Segment::Literal(_), Segment::Param(_)) => return Ordering::Less,
                (Segment::Param(_), Segment::Literal(_)) => return Ordering::Greater,
                _ => {}
            }
        }
        Ordering::Equal
    }
}

impl Table {
    /// Serves `routes` (shared: later registrations and removals are seen).
    pub(crate) fn new(routes: Routes) -> Self {
        Self {
            routes,
            snapshot: RwLock::new(Arc::new(Snapshot {
                generation: u64::MAX,
                routes: Vec::new(),
            })),
        }
    }

    /// The snapshot of the current generation, compiled now if the table changed.
    fn current(&self) -> Arc<Snapshot> {
        let generation = self.routes.generation();
        {
            let snapshot = self.snapshot.read();
            if snapshot.generation == generation {
                return Arc::clone(&snapshot);
            }
        }
        // Read the generation before the list: a change in between only causes one
        // more recompilation later, never a stale snapshot kept.
        let fresh = Arc::new(Snapshot {
            generation,
            routes: self.routes.list().into_iter().map(compile).collect(),
        });
        *self.snapshot.write() = Arc::clone(&fresh);
        fresh
    }

    /// The most specific route matching `path`, if any.
    pub(crate) fn find(&self, path: &str) -> Option<Matched> {
        let snapshot = self.current();
        let segments = split(path);
        let mut best: Option<(&Compiled, BTreeMap<String, String>, String)> = None;
        for route in &snapshot.routes {
            let Some((params, rest)) = route.matches(&segments) else {
                continue;
            };
            let better = match &best {
                None => true,
                Some((held, _, _)) => route.specificity(held).is_lt(),
            };
            if better {
                best = Some((route, params, rest));
            }
        }
        best.map(|(route, params, rest)| Matched {
            entry: Arc::clone(&route.entry),
            params,
            rest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccare_agent::routes::{Method, RouteDoc, RoutePath, RouteReply, RouteRequest, RouteSpec};

    async fn ok(_: RouteRequest) -> RouteReply {
        RouteReply::json(200, &"ok")
    }

    fn add(routes: &Routes, path: Result<RoutePath, ccare_agent::routes::RoutePathError>) {
        let Ok(path) = path else {
            panic!("bad pattern");
        };
        let spec = RouteSpec::new(path, Arc::new(ok)).method(Method::Get, RouteDoc::new("test"));
        assert_eq!(routes.register("t", spec), Ok(()));
    }

    /// What a match gave: the pattern, the parameters, the rest.
    type Found = (String, Vec<(String, String)>, String);

    fn found(table: &Table, path: &str) -> Option<Found> {
        table.find(path).map(|matched| {
            (
                matched.entry.spec.path.pattern().to_owned(),
                matched.params.into_iter().collect(),
                matched.rest,
            )
        })
    }

    #[test]
    fn h_http_1_the_most_specific_route_wins_and_changes_are_seen() {
        let routes = Routes::default();
        add(&routes, RoutePath::exact("/"));
        add(&routes, RoutePath::exact("/api/sessions/{id}"));
        add(&routes, RoutePath::exact("/api/sessions/new"));
        add(&routes, RoutePath::prefix("/ui/"));
        add(&routes, RoutePath::prefix("/"));
        let table = Table::new(routes.clone());
        let pair = |key: &str, value: &str| (key.to_owned(), value.to_owned());
        assert_eq!(
            found(&table, "/"),
            Some(("/".into(), vec![], String::new()))
        );
        assert_eq!(
            found(&table, "/api/sessions/s1"),
            Some((
                "/api/sessions/{id}".into(),
                vec![pair("id", "s1")],
                String::new()
            ))
        );
        assert_eq!(
            found(&table, "/api/sessions/new"),
            Some(("/api/sessions/new".into(), vec![], String::new()))
        );
        assert_eq!(
            found(&table, "/ui/a/b.js"),
            Some(("/ui/".into(), vec![], "a/b.js".into()))
        );
        assert_eq!(
            found(&table, "/ui/"),
            Some(("/ui/".into(), vec![], String::new()))
        );
        // An empty segment is no parameter: the catch-all prefix answers instead.
        assert_eq!(
            found(&table, "/api/sessions/"),
            Some(("/".into(), vec![], "api/sessions/".into()))
        );
        assert_eq!(routes.remove_owner("t"), 5);
        assert!(table.find("/").is_none());
    }
}
