//! The OpenAPI description of the gateway: its admin routes (from `admin`) and its model
//! routes under `/r/{key}/`, which are one catch-all route in the router and are described here
//! one by one.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Ref, Type};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{Content, HttpMethod, Required, ResponseBuilder};

use crate::call::reply::ErrorReply;
use rollpoint_proto::key::AttemptKey;

/// The OpenAPI description of the gateway: its control routes and its model routes
/// (`GET /metrics` and the checkpoint control routes are described apart).
#[derive(Debug)]
pub struct GatewayApi;

/// The model routes under `/r/{key}/`: method, path after the key, summary.
const MODEL_ROUTES: [(HttpMethod, &str, &str); 4] = [
    (
        HttpMethod::Post,
        "v1/chat/completions",
        "An OpenAI chat completions call.",
    ),
    (
        HttpMethod::Post,
        "v1/responses",
        "An OpenAI Responses call.",
    ),
    (
        HttpMethod::Post,
        "v1/messages",
        "An Anthropic Messages call.",
    ),
    (HttpMethod::Get, "v1/models", "The upstream's model list."),
];

impl utoipa::OpenApi for GatewayApi {
    fn openapi() -> utoipa::openapi::OpenApi {
        use utoipa::{PartialSchema as _, ToSchema as _};
        let mut doc = <crate::admin::AdminApi as utoipa::OpenApi>::openapi();
        for (method, route, summary) in MODEL_ROUTES {
            doc.paths.add_path_operation(
                format!("/r/{{key}}/{route}"),
                vec![method.clone()],
                model_operation(method, route, summary),
            );
        }
        let components = doc.components.get_or_insert_with(Default::default);
        let mut schemas = vec![(ErrorReply::name().into_owned(), ErrorReply::schema())];
        ErrorReply::schemas(&mut schemas);
        schemas.push((AttemptKey::name().into_owned(), AttemptKey::schema()));
        components.schemas.extend(schemas);
        doc.tags.get_or_insert_with(Vec::new).push(
            TagBuilder::new()
                .name("gateway")
                .description(Some(
                    "The model gateway (`rollpoint gateway`): a byte-exact recording proxy for \
                     the model routes under `/r/{key}/`, which take no token, and its control \
                     routes, which need the bearer token. It also serves the checkpoint control \
                     routes as the model participant.",
                ))
                .build(),
        );
        doc
    }
}

/// The description of one model route: an opaque JSON body passed upstream and the
/// upstream's reply passed back, or the gateway's own error.
fn model_operation(method: HttpMethod, route: &str, summary: &str) -> Operation {
    use utoipa::ToSchema as _;
    let object = || {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("As the upstream's API defines it."))
            .build()
    };
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name(ErrorReply::name()))),
            )
            .build()
    };
    let call_id = HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some("The ledger row of the call (`<key>#<seq>`)."))
        .build();
    let replayed = HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some(
            "On a reply answered from the ledger: the recorded call it repeats.",
        ))
        .build();
    let ok = ResponseBuilder::new()
        .description(
            "The upstream's reply, byte for byte: JSON, or `text/event-stream` for a \
             streamed call; after a restore, a repeated call is answered from the ledger.",
        )
        .header("x-rollpoint-call-id", call_id)
        .header("x-rollpoint-replayed-from", replayed)
        .content("application/json", Content::new(Some(object())))
        .content(
            "text/event-stream",
            Content::new(Some(ObjectBuilder::new().schema_type(Type::String).build())),
        )
        .build();
    let key = ParameterBuilder::new()
        .name("key")
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .description(Some(
            "The capture key: the attempt key the call belongs to, registered with the \
             gateway (or any key with `--open-keys`), followed by `@` and the attempt's route \
             secret when the gateway holds a route key.",
        ))
        .schema(Some(Ref::from_schema_name(AttemptKey::name())));
    let mut operation = OperationBuilder::new()
        .tag("gateway")
        .operation_id(Some(format!(
            "gateway_model_{}",
            route.trim_start_matches("v1/").replace('/', "_")
        )))
        .summary(Some(summary))
        .description(Some(
            "Passed to the upstream as it came (the gateway sets the upstream's credential) \
             and recorded in the call ledger; while a checkpoint holds the gate, the call waits \
             or its reply is held.",
        ))
        .parameter(key)
        .response("200", ok)
        .response(
            "default",
            ResponseBuilder::new()
                .description("The upstream's own error status and body, passed on.")
                .build(),
        )
        .response(
            "400",
            error("The body could not be read or is not a JSON object (`body_unreadable`, `invalid_json`)."),
        )
        .response(
            "403",
            error(
                "The gateway holds a route key and the route does not carry its attempt's \
                 secret (`/r/<key>@<secret>/`): refused before anything is recorded \
                 (`route_forbidden`).",
            ),
        )
        .response(
            "404",
            error(
                "The key is malformed or not registered, or the upstream does not serve the \
                 route (`unknown_capture_key`, `route_not_served`).",
            ),
        )
        .response(
            "409",
            error("A later attempt of the rollout is registered (`attempt_fenced`)."),
        )
        .response(
            "413",
            error("The body is over the gateway's `max_body_bytes` (`body_too_large`)."),
        )
        .response(
            "500",
            error("The ledger refused the call, or the reply broke off (`ledger_error`, `upstream_broken`)."),
        )
        .response(
            "502",
            error("The upstream could not be reached (`upstream_unreachable`)."),
        )
        .response(
            "503",
            error("The gateway is draining and takes no new call (`gateway_closed`)."),
        );
    if method == HttpMethod::Post {
        operation = operation.request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content("application/json", Content::new(Some(object())))
                .build(),
        ));
    }
    operation.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Route;

    /// Every route the proxy serves is described, and nothing else.
    #[test]
    fn model_routes_are_the_proxy_routes() {
        let mut described = Vec::new();
        for (method, route, _) in MODEL_ROUTES {
            let method = match method {
                HttpMethod::Get => axum::http::Method::GET,
                HttpMethod::Post => axum::http::Method::POST,
                _ => panic!("{route}: a method the model routes do not take"),
            };
            let found = Route::from_path(&method, route);
            assert!(
                found.is_some(),
                "{method} /r/{{key}}/{route} is not a proxy route"
            );
            described.extend(found);
        }
        // A new route fails to compile here until it is described above.
        for every in [
            Route::Chat,
            Route::Responses,
            Route::Messages,
            Route::Models,
        ] {
            match every {
                Route::Chat | Route::Responses | Route::Messages | Route::Models => {}
            }
            assert!(described.contains(&every), "{every:?} is not described");
        }
    }
}
