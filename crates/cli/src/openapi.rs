//! The OpenAPI 3.1 description of every HTTP API rollpoint serves, in one
//! document: each service's part comes from its own crate (its handlers'
//! `#[utoipa::path]` and its bodies' `ToSchema`), and `GET /metrics`, which
//! every service serves, is described here. A tag per service; no servers,
//! since each service listens where it is told. The limits the servers
//! enforce on requests are added after generation (`openapi_limits`).
//! `rollpoint openapi` prints it and docs/openapi.json is the checked-in copy.

use anyhow::bail;
use utoipa::OpenApi as _;
use utoipa::openapi::path::{OperationBuilder, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    Components, Content, HttpMethod, InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder,
    ResponseBuilder,
};

/// The name of the bearer-token security scheme the routes refer to.
const BEARER: &str = "bearer";

/// The document's description: what it covers.
const DESCRIPTION: &str = "The HTTP APIs of rollpoint's services, one tag per service: the owner, \
     the agent, the coordinator, the gateway, the run's control endpoint, and the checkpoint \
     control routes the owner, the agent and the gateway each serve. Error replies are JSON \
     objects `{\"error\": {...}}`.";

/// The whole document, or why its parts do not fit together (a route or a
/// schema name described twice, differently).
pub fn document() -> anyhow::Result<OpenApi> {
    let info = InfoBuilder::new()
        .title("rollpoint")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(DESCRIPTION))
        .license(Some(
            LicenseBuilder::new()
                .name("Apache-2.0")
                .identifier(Some("Apache-2.0"))
                .build(),
        ))
        .build();
    let mut doc = OpenApiBuilder::new().info(info).build();
    let parts = [
        ("owner", rollpoint_owner::OwnerApi::openapi()),
        ("agent", rollpoint_serve::agent::AgentApi::openapi()),
        (
            "coordinator",
            rollpoint_serve::coordinator::CoordinatorApi::openapi(),
        ),
        ("gateway", rollpoint_gateway::GatewayApi::openapi()),
        ("run", rollpoint_run::endpoint::RunApi::openapi()),
        ("checkpoint", rollpoint_checkpoint::CheckpointApi::openapi()),
        ("metrics", metrics()),
    ];
    for (name, part) in parts {
        merge(&mut doc, name, part)?;
    }
    let bearer = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "`Authorization: Bearer <token>`, the token the service was started with, \
             compared in constant time. An empty token admits no request.",
        ))
        .build();
    doc.components
        .get_or_insert_with(Components::new)
        .add_security_scheme(BEARER, SecurityScheme::Http(bearer));
    Ok(doc)
}

/// The document with the limits the servers enforce
/// ([`crate::openapi_limits`]) as pretty JSON with a trailing newline. Its
/// keys are sorted: the limits are added to it as a JSON value.
pub fn json() -> anyhow::Result<String> {
    let mut doc = serde_json::to_value(document()?)?;
    crate::openapi_limits::apply(&mut doc)?;
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}

/// Adds `part` to `doc`: its paths, schemas and tags. A method of a path
/// already described, or a schema name already taken by another schema, is
/// an error rather than silently dropped.
fn merge(doc: &mut OpenApi, name: &str, part: OpenApi) -> anyhow::Result<()> {
    for (path, item) in &part.paths.paths {
        if let Some(have) = doc.paths.paths.get(path) {
            for (method, _) in operations(item) {
                if operations(have).iter().any(|(m, _)| *m == method) {
                    bail!("{name}: {method} {path} is described twice");
                }
            }
        }
    }
    if let Some(components) = part.components {
        let into = doc.components.get_or_insert_with(Components::new);
        for (schema, body) in components.schemas {
            match into.schemas.get(&schema) {
                Some(have) if *have != body => {
                    bail!("{name}: schema {schema} differs from another of that name")
                }
                Some(_) => {}
                None => {
                    into.schemas.insert(schema, body);
                }
            }
        }
        for (scheme, body) in components.security_schemes {
            into.security_schemes.insert(scheme, body);
        }
    }
    doc.paths.merge(part.paths);
    if let Some(tags) = part.tags {
        doc.tags.get_or_insert_with(Vec::new).extend(tags);
    }
    Ok(())
}

/// The operations of a path item, by method.
fn operations(item: &PathItem) -> Vec<(&'static str, &utoipa::openapi::path::Operation)> {
    [
        ("GET", &item.get),
        ("PUT", &item.put),
        ("POST", &item.post),
        ("DELETE", &item.delete),
        ("OPTIONS", &item.options),
        ("HEAD", &item.head),
        ("PATCH", &item.patch),
        ("TRACE", &item.trace),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.as_ref().map(|op| (method, op)))
    .collect()
}

/// `GET /metrics`, one route on every service.
fn metrics() -> OpenApi {
    let text = Content::new(Some(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("OpenMetrics text."))
            .build(),
    ));
    let operation = OperationBuilder::new()
        .tags(Some(["owner", "agent", "coordinator", "gateway", "run"]))
        .operation_id(Some("metrics"))
        .summary(Some("The service's metrics, as OpenMetrics text."))
        .description(Some(
            "Every service serves it: the gateway without a token, the owner, the agent, \
             the coordinator and the run's control endpoint only with the bearer token.",
        ))
        .response(
            "200",
            ResponseBuilder::new()
                .description("The metrics, counted at the scrape.")
                .content(rollpoint_api::metrics::OPENMETRICS, text)
                .build(),
        )
        .response(
            "401",
            ResponseBuilder::new()
                .description(
                    "A missing or wrong bearer token, on a service that needs one; the body \
                     is that service's error reply.",
                )
                .build(),
        )
        .securities(Some([
            SecurityRequirement::default(),
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
        ]))
        .build();
    let mut doc = OpenApiBuilder::new().build();
    doc.paths
        .add_path_operation("/metrics", vec![HttpMethod::Get], operation);
    doc
}

#[cfg(test)]
mod tests {
    /// The parts fit together: no route or schema name is described twice.
    #[test]
    fn parts_fit() {
        if let Err(e) = super::document() {
            panic!("{e}");
        }
    }
}
