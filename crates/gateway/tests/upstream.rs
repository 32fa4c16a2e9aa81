//! The upstream side: an `https://` upstream behind a real TLS terminator with a test CA
//! (trusted through `ca_file`; refused, naming the upstream and the reason, without it), the
//! credential the gateway injects in place of the harness's key, the limit of calls upstream
//! at once, and retries of a connection that failed.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_gateway::credential::Credential;
use tokio::net::{TcpListener, TcpStream};

/// A test CA and a certificate for `localhost` it signed: (CA PEM, leaf DER, leaf key DER).
fn test_pki() -> (String, Vec<u8>, Vec<u8>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "rollpoint test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    (ca.pem(), leaf.der().to_vec(), leaf_key.serialize_der())
}

/// A TLS terminator on 127.0.0.1: each connection's TLS is ended here and its bytes copied to
/// and from `backend`.
async fn terminator(backend: SocketAddr, cert: Vec<u8>, key: Vec<u8>) -> SocketAddr {
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.into()],
        tokio_rustls::rustls::pki_types::PrivateKeyDer::try_from(key).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_https_upstream_is_reached_with_its_ca_and_refused_by_name_without_it() {
    let model = model(script(vec![text("over tls")])).await;
    let (ca_pem, cert, key) = test_pki();
    let tls = terminator(model.addr(), cert, key).await;
    let upstream = format!("https://localhost:{}", tls.port());
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca_dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();

    let trusted = gateway_with(&upstream, |c| c.ca_file = Some(ca_file.clone())).await;
    trusted.gateway.register(&"t1".parse().unwrap()).unwrap();
    let body = Conversation::new(Route::Chat, false, "x").body();
    let reply = post(
        &client(),
        &trusted.url("t1", path(Route::Chat)),
        body.clone(),
    )
    .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(String::from_utf8_lossy(&reply.body).contains("over tls"));
    let rows = trusted.settled("t1").await;
    assert_eq!(rows[0].status, "ok");

    let untrusted = gateway(&upstream, &["t2"]).await;
    let reply = post(&client(), &untrusted.url("t2", path(Route::Chat)), body).await;
    assert_eq!(reply.status, 502);
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    assert!(text.contains(&upstream), "names the upstream: {text}");
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
        "says why: {text}"
    );
    assert_eq!(
        model.requests(),
        1,
        "the untrusted call never reached the model"
    );
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_is_refused_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, "not a certificate\n").unwrap();
    let mut config = rollpoint_gateway::GatewayConfig::new(
        "https://localhost:1",
        rollpoint_gateway::UpstreamApi::All,
        dir.path().join("ledger.db"),
    );
    config.ca_file = Some(ca_file.clone());
    let e = rollpoint_gateway::Gateway::new(config)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&ca_file.display().to_string()), "{e}");
}

/// An upstream that answers every call with a fixed chat completion and keeps each request's
/// headers.
async fn header_keeper() -> (SocketAddr, Arc<Mutex<Vec<HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let kept = Arc::clone(&kept);
        async move {
            kept.lock().unwrap().push(headers);
            (
                [("content-type", "application/json")],
                r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
            )
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test]
async fn the_gateway_sends_its_credential_and_never_the_harness_s_key() {
    let (addr, seen) = header_keeper().await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sk-upstream-marker\n").unwrap();
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let credential = Credential::from_file(&key_file).unwrap();
    let gw = gateway_with(&format!("http://{addr}"), |c| {
        c.credential = Some(credential)
    })
    .await;
    for key in ["k1", "k2"] {
        gw.gateway.register(&key.parse().unwrap()).unwrap();
    }
    let http = client();
    let chat = http
        .post(gw.url("k1", path(Route::Chat)))
        .header("authorization", "Bearer harness-dummy")
        .header("api-key", "harness-dummy")
        .body(Conversation::new(Route::Chat, false, "x").body())
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    let messages = http
        .post(gw.url("k2", path(Route::Messages)))
        .header("x-api-key", "harness-dummy")
        .body(Conversation::new(Route::Messages, false, "x").body())
        .send()
        .await
        .unwrap();
    assert_eq!(messages.status(), 200);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0]["authorization"], "Bearer sk-upstream-marker");
    assert!(seen[0].get("api-key").is_none() && seen[0].get("x-api-key").is_none());
    assert_eq!(seen[1]["x-api-key"], "sk-upstream-marker");
    assert!(seen[1].get("authorization").is_none());
    for h in &seen {
        assert!(
            !format!("{h:?}").contains("harness-dummy"),
            "the harness's key reached the upstream: {h:?}"
        );
    }
    // Nothing of the key in the ledger file.
    gw.gateway.flush().await.unwrap();
    let ledger = std::fs::read(gw.dir.path().join("ledger.db")).unwrap();
    let marker = b"sk-upstream-marker";
    assert!(
        !ledger.windows(marker.len()).any(|w| w == marker),
        "the credential is in the ledger"
    );
}

#[tokio::test]
async fn calls_over_the_limit_wait_their_turn() {
    let slow = rollpoint_model_script::Step {
        delay_ms: 300,
        ..text("one at a time")
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway_with(&model.base_url(), |c| c.max_upstream_calls = 1).await;
    let mut asks = Vec::new();
    for i in 0..3 {
        let key = format!("l{i}");
        gw.gateway.register(&key.parse().unwrap()).unwrap();
        let url = gw.url(&key, path(Route::Chat));
        asks.push(tokio::spawn(async move {
            post(
                &client(),
                &url,
                Conversation::new(Route::Chat, false, "x").body(),
            )
            .await
        }));
    }
    // With one turn, a call reaches the model only once the one before it is recorded.
    while asks.iter().any(|a| !a.is_finished()) {
        let in_model = model.requests();
        let done = gw
            .gateway
            .calls(None)
            .await
            .unwrap()
            .iter()
            .filter(|r| r.status == "ok")
            .count();
        assert!(
            in_model <= done + 1,
            "{in_model} calls reached the model with {done} answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in asks {
        assert_eq!(a.await.unwrap().status, 200);
    }
    assert_eq!(model.requests(), 3);
}

#[tokio::test]
async fn a_connection_that_failed_is_tried_again_before_the_call_fails() {
    // A port with nobody on it yet; the model starts there 150 ms after the call is sent.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let gw = gateway(&format!("http://{addr}"), &["late"]).await;
    let starting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        rollpoint_model_script::ScriptServer::start(script(vec![text("there now")]), addr, None)
            .await
            .unwrap()
    });
    let reply = post(
        &client(),
        &gw.url("late", path(Route::Chat)),
        Conversation::new(Route::Chat, false, "x").body(),
    )
    .await;
    let model = starting.await.unwrap();
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(model.requests(), 1, "one call reached the model");
}

#[tokio::test]
async fn calls_go_to_the_upstream_of_their_model_and_the_rest_to_the_default() {
    let default = model(script(vec![text("from the default")])).await;
    let other = model(script(vec![text("from the other")])).await;
    let gw = gateway_with(&default.base_url(), |c| {
        c.models.push(rollpoint_gateway::config::ModelUpstream {
            name: "other-model".to_owned(),
            upstream: other.base_url(),
            replicas: Vec::new(),
            sticky: true,
            api: rollpoint_gateway::UpstreamApi::Anthropic,
            ca_file: None,
            credential: None,
            max_upstream_calls: 0,
        });
    })
    .await;
    for key in ["d1", "o1", "o2"] {
        gw.gateway.register(&key.parse().unwrap()).unwrap();
    }
    let named = |route: Route, model: &str| {
        let mut body: serde_json::Value =
            serde_json::from_slice(&Conversation::new(route, false, "x").body()).unwrap();
        body["model"] = serde_json::json!(model);
        serde_json::to_vec(&body).unwrap()
    };
    let to_default = post(
        &client(),
        &gw.url("d1", path(Route::Chat)),
        named(Route::Chat, "scripted-model"),
    )
    .await;
    assert!(String::from_utf8_lossy(&to_default.body).contains("from the default"));
    let to_other = post(
        &client(),
        &gw.url("o1", path(Route::Messages)),
        named(Route::Messages, "other-model"),
    )
    .await;
    assert_eq!(to_other.status, 200);
    assert!(String::from_utf8_lossy(&to_other.body).contains("from the other"));
    // The other upstream speaks Messages only: a chat call naming it is refused by name.
    let refused = post(
        &client(),
        &gw.url("o2", path(Route::Chat)),
        named(Route::Chat, "other-model"),
    )
    .await;
    assert_eq!(refused.status, 404);
    let text = String::from_utf8_lossy(&refused.body).into_owned();
    assert!(
        text.contains("route_not_served") && text.contains(&other.base_url()),
        "{text}"
    );
    assert_eq!((default.requests(), other.requests()), (1, 1));
}

#[tokio::test]
async fn a_model_given_two_upstreams_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = rollpoint_gateway::GatewayConfig::new(
        "http://127.0.0.1:1",
        rollpoint_gateway::UpstreamApi::All,
        dir.path().join("ledger.db"),
    );
    for _ in 0..2 {
        config
            .models
            .push(rollpoint_gateway::config::ModelUpstream {
                name: "twice".to_owned(),
                upstream: "http://127.0.0.1:2".to_owned(),
                replicas: Vec::new(),
                sticky: true,
                api: rollpoint_gateway::UpstreamApi::All,
                ca_file: None,
                credential: None,
                max_upstream_calls: 0,
            });
    }
    let e = rollpoint_gateway::Gateway::new(config)
        .unwrap_err()
        .to_string();
    assert!(e.contains("twice"), "{e}");
}
