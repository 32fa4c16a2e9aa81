//! The path of one model call, one stage per file in the order a call takes them:
//!
//! 1. [`route`]: the route key's secret, the route, the attempt key, the body's size and JSON;
//! 2. [`admit`]: the gate, the drain's count, the call's [`CallId`](crate::ledger::CallId),
//!    or a refusal's ledger row;
//! 3. [`hold`]: a paused fleet, a stalled or given-up attempt;
//! 4. [`send`]: upstream, with an outage waited out across replicas;
//! 5. [`forward`] byte-exact, or [`tito`] (token-in/token-out) for a chat call when the
//!    gateway renders prompts itself; either may answer from the ledger instead (a replay);
//! 6. [`record`]: the reply into the ledger while it streams;
//! 7. [`deliver`]: the reply to the caller through the gate;
//! 8. [`reply`]: the gateway's own replies and the headers passed on.
//!
//! Stages import only stages below them and the crate's state and ledger; nothing outside
//! this folder imports a stage but the router (`handle`) and the API description (`reply`).

mod admit;
mod deliver;
mod forward;
mod hold;
mod record;
pub(crate) mod reply;
mod route;
mod send;
mod tito;
mod types;

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::response::Response;

use crate::attach::AttachedSandbox;
use crate::conversation::Route;
use crate::shared::Shared;

/// `ANY /r/{key}/{*rest}`, `{key}` being `<attempt key>` or
/// `<attempt key>@<secret>`. The secret is checked here and goes no further:
/// no log, span or ledger row sees it.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((segment, rest)): Path<(String, String)>,
    req: Request,
) -> Response {
    let (key, secret) = rollpoint_proto::route::split(&segment);
    let sandbox = req
        .extensions()
        .get::<AttachedSandbox>()
        .map(|s| s.0.as_str());
    if let Some(refused) = route::forbidden(&shared, key, secret, sandbox) {
        return refused;
    }
    run(shared, key, rest, req).await
}

/// The stages in order.
#[tracing::instrument(name = "call", skip_all, fields(key = %key, path = %rest, call = tracing::field::Empty))]
async fn run(shared: Arc<Shared>, key: &str, rest: String, req: Request) -> Response {
    let admitted_ms = types::now_ms();
    if shared.is_closed() {
        return admit::closed(&shared, key);
    }
    let (parts, body) = req.into_parts();
    let checked = match route::check(&shared, key, &parts.method, &rest, body).await {
        Ok(c) => c,
        Err(refused) => return admit::refuse(&shared, refused, admitted_ms).await,
    };
    let call = match admit::admit(&shared, checked, admitted_ms).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    match &shared.tito {
        Some(tito) if call.route == Route::Chat => {
            tito::call(&shared, tito, call, &parts.headers).await
        }
        _ => forward::call(&shared, call, parts, &rest).await,
    }
}
