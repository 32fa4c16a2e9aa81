//! Lineage over a scripted 20-turn conversation with parallel tool calls, for each API,
//! streamed: every call's parent resolves to the call before it and no branch appears; a
//! retried call resolves to the same parent and its child collapses onto the earliest retry.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::HashSet;

use common::*;
use rollpoint_gateway::conversation::Route;

fn twenty_turns() -> rollpoint_model_script::Script {
    let mut steps = Vec::new();
    for i in 0..19 {
        let cmds: Vec<String> = (0..=(i % 3)).map(|j| format!("echo turn{i}.{j}")).collect();
        let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
        steps.push(shell(&cmds));
    }
    steps.push(text("finished after 20 turns"));
    script(steps)
}

async fn check(route: Route) {
    let model = model(twenty_turns()).await;
    let gw = gateway(&model.base_url(), &["lin"]).await;
    let client = client();
    let mut conv = Conversation::new(route, true, "do twenty things");
    let mut ids = Vec::new();
    let mut parallel = 0;
    for turn in 0..20 {
        let reply = post(&client, &gw.url("lin", path(route)), conv.body()).await;
        assert_eq!(reply.status, 200, "turn {turn}");
        ids.push(reply.call_id.clone().unwrap());
        if conv.absorb(&reply.body) > 1 {
            parallel += 1;
        }
        // No waiting for the ledger: the next turn may be admitted before this reply is
        // recorded, and its parent is then settled when the reply is.
    }
    assert!(
        parallel >= 10,
        "the script made parallel tool calls ({parallel} turns)"
    );
    let rows = gw.settled("lin").await;
    assert_eq!(rows.len(), 20);
    assert_eq!(rows[0].lineage, "root");
    assert_eq!(rows[0].lineage_reason.as_deref(), Some("first_turn"));
    let mut parents = HashSet::new();
    for (i, row) in rows.iter().enumerate().skip(1) {
        assert_eq!(
            row.lineage, "resolved",
            "{route:?} call {i}: {:?}",
            row.lineage_reason
        );
        assert_eq!(
            row.parent_call_id.as_ref(),
            Some(&ids[i - 1]),
            "{route:?} call {i}"
        );
        assert!(
            parents.insert(row.parent_call_id.clone()),
            "branch at call {i}"
        );
    }
    let known: HashSet<&String> = rows.iter().map(|r| &r.call_id).collect();
    assert!(
        rows.iter()
            .filter_map(|r| r.parent_call_id.as_ref())
            .all(|p| known.contains(p))
    );
}

#[tokio::test]
async fn chat_twenty_turns() {
    check(Route::Chat).await;
}

#[tokio::test]
async fn responses_twenty_turns() {
    check(Route::Responses).await;
}

#[tokio::test]
async fn messages_twenty_turns() {
    check(Route::Messages).await;
}

#[tokio::test]
async fn retries_share_a_parent_and_collapse() {
    let model = model(twenty_turns()).await;
    let gw = gateway(&model.base_url(), &["re"]).await;
    let client = client();
    let url = gw.url("re", path(Route::Chat));
    let mut conv = Conversation::new(Route::Chat, false, "retry");
    let first = post(&client, &url, conv.body()).await;
    conv.absorb(&first.body);
    gw.settled("re").await;
    let body = conv.body();
    let a = post(&client, &url, body.clone()).await;
    gw.settled("re").await;
    let b = post(&client, &url, body).await;
    gw.settled("re").await;
    conv.absorb(&b.body);
    let next = post(&client, &url, conv.body()).await;
    let rows = gw.settled("re").await;
    let row = |id: &Option<String>| {
        rows.iter()
            .find(|r| &Some(r.call_id.clone()) == id)
            .unwrap()
    };
    assert_eq!(row(&a.call_id).parent_call_id, first.call_id);
    assert_eq!(row(&b.call_id).parent_call_id, first.call_id);
    assert_eq!(
        row(&next.call_id).parent_call_id,
        a.call_id,
        "identical retries collapse"
    );
}
