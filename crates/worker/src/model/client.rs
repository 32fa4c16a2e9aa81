//! The HTTP side of a model call: plain HTTP/1.1 through `ureq` (synchronous, no TLS, no async
//! runtime, so the worker stays a small static binary), bounded retries with backoff, and a
//! deadline that covers every attempt and every wait: an unreachable endpoint ends the call as
//! a transient error, never a hang.

use std::time::{Duration, Instant};

use super::retry;
use crate::errors::ModelError;

/// Largest reply body accepted.
const MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024;

/// One endpoint of one rollout.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    url: String,
    bearer: Option<String>,
}

/// How one attempt failed.
enum Failure {
    Retry(String),
    Fatal(String),
}

/// A successful call.
#[derive(Debug)]
pub struct Answer {
    pub body: Vec<u8>,
    pub retries: u32,
}

impl Client {
    pub fn new(url: String, bearer: Option<String>) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Talk to the configured endpoint directly, whatever proxy the sandbox sets.
            .proxy(None)
            .max_redirects(0)
            .build();
        Self {
            agent: ureq::Agent::new_with_config(config),
            url,
            bearer,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Posts `body`, retrying transient failures up to `retries` times while `call_deadline`
    /// and `run_deadline` allow. `idempotency_key` is the same for every attempt and every
    /// launch of the same call, so a recording gateway can answer a repeat from its ledger.
    pub fn post(
        &self,
        body: &[u8],
        idempotency_key: &str,
        call_deadline: Instant,
        run_deadline: Instant,
        retries: u32,
    ) -> Result<Answer, ModelError> {
        let deadline = call_deadline.min(run_deadline);
        let mut attempt: u32 = 0;
        let mut last = String::from("no attempt made");
        loop {
            let now = Instant::now();
            let Some(remaining) = deadline
                .checked_duration_since(now)
                .filter(|d| !d.is_zero())
            else {
                return Err(self.out_of_time(run_deadline <= call_deadline, attempt, &last));
            };
            match self.attempt(body, idempotency_key, remaining) {
                Ok(body) => {
                    return Ok(Answer {
                        body,
                        retries: attempt,
                    });
                }
                Err(Failure::Fatal(message)) => {
                    return Err(ModelError::Fatal {
                        url: self.url.clone(),
                        message,
                    });
                }
                Err(Failure::Retry(message)) => last = message,
            }
            if attempt >= retries {
                return Err(ModelError::Transient {
                    url: self.url.clone(),
                    message: format!("gave up after {} attempts: {last}", attempt + 1),
                });
            }
            let delay = retry::backoff(attempt);
            if Instant::now() + delay >= deadline {
                return Err(self.out_of_time(run_deadline <= call_deadline, attempt + 1, &last));
            }
            std::thread::sleep(delay);
            attempt += 1;
        }
    }

    fn out_of_time(&self, run_ended: bool, attempts: u32, last: &str) -> ModelError {
        if run_ended {
            ModelError::Deadline {
                url: self.url.clone(),
            }
        } else {
            ModelError::Transient {
                url: self.url.clone(),
                message: format!(
                    "no answer before the call deadline after {attempts} attempts: {last}"
                ),
            }
        }
    }

    fn attempt(&self, body: &[u8], key: &str, timeout: Duration) -> Result<Vec<u8>, Failure> {
        let mut request = self
            .agent
            .post(&self.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("content-type", "application/json")
            .header("idempotency-key", key);
        if let Some(token) = &self.bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let mut response = request.send(body).map_err(classify)?;
        let status = response.status().as_u16();
        let reply = response
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_vec()
            .map_err(classify)?;
        if (200..300).contains(&status) {
            return Ok(reply);
        }
        let excerpt: String = String::from_utf8_lossy(&reply).chars().take(300).collect();
        let message = format!("answered {status}: {excerpt}");
        if retry::status_is_transient(status) {
            Err(Failure::Retry(message))
        } else {
            Err(Failure::Fatal(message))
        }
    }
}

fn classify(error: ureq::Error) -> Failure {
    match error {
        ureq::Error::Timeout(_)
        | ureq::Error::Io(_)
        | ureq::Error::ConnectionFailed
        | ureq::Error::HostNotFound
        | ureq::Error::Protocol(_)
        | ureq::Error::BodyStalled => Failure::Retry(error.to_string()),
        other => Failure::Fatal(other.to_string()),
    }
}
