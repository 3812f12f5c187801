//! The OpenAPI 3.1 document of every route in the table (API-5), built from the
//! routes' [`RouteDoc`]s, whose schemas `schemars` generated from the Rust types. Typed
//! structs serialized to JSON; the JSON Schemas inside are kept as values, their
//! `$defs` hoisted into `components.schemas` so every `$ref` resolves in the document.
//!
//! A prefix route `/ui/` appears as `/ui/{rest}`: OpenAPI has no prefix paths, and
//! `rest` (which may contain `/`) is what the handler gets as `RouteRequest::rest`.

use std::collections::BTreeMap;

use ccare_agent::routes::{ErrorBody, RouteAuth, RouteDoc, RouteEntry, RoutePath, schema_of};
use serde::Serialize;
use serde_json::Value;

use super::auth::SESSION_COOKIE;

/// The parameter name a prefix route's rest of the path gets in the document.
pub const PREFIX_REST: &str = "rest";

/// The OpenAPI path of a route's pattern.
pub fn openapi_path(path: &RoutePath) -> String {
    if path.is_prefix() {
        format!("{}{{{PREFIX_REST}}}", path.pattern())
    } else {
        path.pattern().to_owned()
    }
}

/// The document's root.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OpenApi {
    /// `3.1.0`.
    pub openapi: String,
    /// Title and version.
    pub info: Info,
    /// Every route's operations by OpenAPI path, then lower-case method.
    pub paths: BTreeMap<String, BTreeMap<String, Operation>>,
    /// The shared schemas and the security schemes.
    pub components: Components,
    /// The default security: the bearer token or the session cookie.
    pub security: Vec<BTreeMap<String, Vec<String>>>,
}

/// `info`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Info {
    /// The API's name.
    pub title: String,
    /// The crate version.
    pub version: String,
}

/// One operation (a method of a route).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// What it does.
    pub summary: String,
    /// `METHOD path`, unique in the document.
    pub operation_id: String,
    /// Who registered the route (`server` or a plugin).
    pub tags: Vec<String>,
    /// Path and query parameters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Parameter>,
    /// The JSON body, when the route takes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_body: Option<RequestBody>,
    /// `200` and `default` (an [`ErrorBody`]).
    pub responses: BTreeMap<String, Response>,
    /// `[]` for a public route; absent (the document's default) otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<BTreeMap<String, Vec<String>>>>,
}

/// A path or query parameter.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Parameter {
    /// Its name.
    pub name: String,
    /// `path` or `query`.
    #[serde(rename = "in")]
    pub location: String,
    /// Path parameters are required, query parameters not.
    pub required: bool,
    /// What it means.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `{type: string}`.
    pub schema: Value,
}

/// A request body.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RequestBody {
    /// Whether a body must be sent.
    pub required: bool,
    /// By media type (`application/json`).
    pub content: BTreeMap<String, MediaType>,
}

/// A response.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Response {
    /// What it is.
    pub description: String,
    /// By media type.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub content: BTreeMap<String, MediaType>,
}

/// A media type's schema.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MediaType {
    /// The JSON Schema, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// `components`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Components {
    /// Shared schemas: `ErrorBody` and every type the routes' schemas refer to.
    pub schemas: BTreeMap<String, Value>,
    /// `bearer` (the token) and `cookie` (the login cookie).
    pub security_schemes: BTreeMap<String, SecurityScheme>,
}

/// A security scheme.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SecurityScheme {
    /// `http` or `apiKey`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `bearer` for `http`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// `cookie` for `apiKey`.
    #[serde(rename = "in", skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The cookie's name for `apiKey`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Moves a generated schema's `$defs` into `schemas` and points its `$ref`s there;
/// drops `$schema` (the document's dialect is 2020-12 already).
fn hoist(mut schema: Value, schemas: &mut BTreeMap<String, Value>) -> Value {
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        if let Some(Value::Object(defs)) = map.remove("$defs") {
            for (name, def) in defs {
                let def = hoist(def, schemas);
                schemas.insert(name, def);
            }
        }
    }
    rewrite_refs(&mut schema);
    schema
}

fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    Value::String(text) if key == "$ref" => {
                        if let Some(name) = text.strip_prefix("#/$defs/") {
                            *text = format!("#/components/schemas/{name}");
                        }
                    }
                    _ => rewrite_refs(inner),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

fn json_content(schema: Option<Value>) -> BTreeMap<String, MediaType> {
    BTreeMap::from([("application/json".to_owned(), MediaType { schema })])
}

fn operation(
    entry: &RouteEntry,
    method: &str,
    doc: &RouteDoc,
    schemas: &mut BTreeMap<String, Value>,
) -> Operation {
    let path = openapi_path(&entry.spec.path);
    let string = serde_json::json!({"type": "string"});
    let mut parameters: Vec<Parameter> = entry
        .spec
        .path
        .params()
        .into_iter()
        .map(|name| Parameter {
            name: name.to_owned(),
            location: "path".to_owned(),
            required: true,
            description: None,
            schema: string.clone(),
        })
        .collect();
    if entry.spec.path.is_prefix() {
        parameters.push(Parameter {
            name: PREFIX_REST.to_owned(),
            location: "path".to_owned(),
            required: true,
            description: Some(format!(
                "the rest of the path after {} (may contain /)",
                entry.spec.path.pattern()
            )),
            schema: string.clone(),
        });
    }
    parameters.extend(doc.query.iter().map(|(name, description)| Parameter {
        name: name.clone(),
        location: "query".to_owned(),
        required: false,
        description: Some(description.clone()),
        schema: string.clone(),
    }));
    let request_body = doc.request.clone().map(|schema| RequestBody {
        required: true,
        content: json_content(Some(hoist(schema, schemas))),
    });
    let success = Response {
        description: "success".to_owned(),
        content: BTreeMap::from([(
            doc.response_type.clone(),
            MediaType {
                schema: doc.response.clone().map(|schema| hoist(schema, schemas)),
            },
        )]),
    };
    let failure = Response {
        description: "an error: {error, message}".to_owned(),
        content: json_content(Some(
            serde_json::json!({"$ref": "#/components/schemas/ErrorBody"}),
        )),
    };
    Operation {
        summary: doc.summary.clone(),
        operation_id: format!("{method} {path}"),
        tags: vec![entry.owner.clone()],
        parameters,
        request_body,
        responses: BTreeMap::from([("200".to_owned(), success), ("default".to_owned(), failure)]),
        security: (entry.spec.auth == RouteAuth::Public).then(Vec::new),
    }
}

/// The document of `entries`.
pub fn document(entries: &[RouteEntry]) -> OpenApi {
    let mut schemas = BTreeMap::new();
    let error = hoist(schema_of::<ErrorBody>(), &mut schemas);
    schemas.insert("ErrorBody".to_owned(), error);
    let mut paths: BTreeMap<String, BTreeMap<String, Operation>> = BTreeMap::new();
    for entry in entries {
        let item = paths.entry(openapi_path(&entry.spec.path)).or_default();
        for (method, doc) in &entry.spec.methods {
            let name = method.as_str().to_ascii_lowercase();
            let operation = operation(entry, method.as_str(), doc, &mut schemas);
            item.insert(name, operation);
        }
    }
    OpenApi {
        openapi: "3.1.0".to_owned(),
        info: Info {
            title: "context-care".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        paths,
        components: Components {
            schemas,
            security_schemes: BTreeMap::from([
                (
                    "bearer".to_owned(),
                    SecurityScheme {
                        kind: "http".to_owned(),
                        scheme: Some("bearer".to_owned()),
                        location: None,
                        name: None,
                    },
                ),
                (
                    "cookie".to_owned(),
                    SecurityScheme {
                        kind: "apiKey".to_owned(),
                        scheme: None,
                        location: Some("cookie".to_owned()),
                        name: Some(SESSION_COOKIE.to_owned()),
                    },
                ),
            ]),
        },
        security: vec![
            BTreeMap::from([("bearer".to_owned(), Vec::new())]),
            BTreeMap::from([("cookie".to_owned(), Vec::new())]),
        ],
    }
}
