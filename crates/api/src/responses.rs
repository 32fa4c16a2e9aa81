//! Error replies in the OpenAPI description. The routes of one surface
//! answer the same errors; each surface names its list once, as a type the
//! `responses(...)` of `#[utoipa::path]` takes, instead of every handler
//! repeating it.

use std::collections::BTreeMap;

use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// The responses `(status, description)`, each with a JSON body of schema
/// `B` (the surface's error reply).
pub fn error_replies<B: utoipa::ToSchema>(
    replies: &[(u16, &str)],
) -> BTreeMap<String, RefOr<Response>> {
    let schema = Ref::from_schema_name(B::name());
    replies
        .iter()
        .map(|&(status, description)| {
            let content = ContentBuilder::new().schema(Some(schema.clone())).build();
            let response = ResponseBuilder::new()
                .description(description)
                .content("application/json", content)
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}
