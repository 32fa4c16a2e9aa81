//! The OpenAPI description of the run's own routes.

/// The OpenAPI description of the run's own routes (its checkpoint route is the
/// coordinator's, and `GET /metrics` is described with every service's).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        super::status::status,
        super::exec::exec,
        super::dashboard::view,
        super::dashboard::rollout,
        super::dashboard::changes,
        super::shell::shell
    ),
    tags((
        name = "run",
        description = "The control endpoint of `rollpoint run` (its address is in \
            `RUN_DIR/control.json`): the run's status, a checkpoint on request, forks of \
            a checkpointed rollout, and each rollout's trajectory (as the agent's route of the \
            same path), the dashboard's documents and change stream, and a command or a terminal in a \
            live rollout's sandbox. Every route needs the bearer token but `GET /`, the \
            dashboard's page, which holds no data."
    )),
)]
pub struct RunApi;
