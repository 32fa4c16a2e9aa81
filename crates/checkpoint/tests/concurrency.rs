//! Many controllers calling one participant at once, over HTTP, with
//! random verbs and ids: no call deadlocks, every reply is a protocol
//! answer, and once every id is resumed the participant is idle and open.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fake, TOKEN, keys, serve};
use rollpoint_checkpoint::wire::{
    CommitRequest, KeysRequest, PrepareRequest, RestoreRequest, ResumeRequest,
};
use rollpoint_checkpoint::{
    Code, HostConfig, HttpParticipant, Kind, ParticipantApi, ParticipantHost, Phase,
};

/// A small deterministic generator (splitmix64): the seed names the run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

async fn one_controller(client: HttpParticipant, seed: u64, ids: u64) {
    let mut rng = Rng(seed);
    for _ in 0..40 {
        let id = format!("c{}-{}", seed % 2, rng.below(ids));
        let timeout_ms = 50 + rng.below(200);
        let result = match rng.below(7) {
            0 | 1 => client
                .prepare(PrepareRequest {
                    checkpoint: id,
                    timeout_ms,
                })
                .await
                .map(|_| ()),
            2 => client
                .commit(CommitRequest {
                    checkpoint: id,
                    timeout_ms,
                    scope: keys(2),
                    stop: false,
                })
                .await
                .map(|_| ()),
            3 | 4 => client
                .resume(ResumeRequest {
                    checkpoint: id,
                    timeout_ms,
                })
                .await
                .map(|_| ()),
            5 => client
                .retire(KeysRequest {
                    keys: keys(1),
                    timeout_ms,
                })
                .await
                .map(|_| ()),
            _ => client
                .restore(RestoreRequest {
                    checkpoint: id,
                    source: "c0-0".to_owned(),
                    timeout_ms,
                    scope: keys(2),
                    fork: None,
                    from_instance: None,
                })
                .await
                .map(|_| ()),
        };
        if let Err(e) = result {
            assert!(
                matches!(
                    e.code,
                    Code::StaleCheckpoint
                        | Code::CheckpointConflict
                        | Code::InvalidPhase
                        | Code::Storage
                        | Code::NotFound
                        | Code::DeadlineExceeded
                ),
                "unexpected error: {e}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_controllers_leave_the_participant_idle_and_open() {
    for seed in [1_u64, 7, 42, 1234] {
        let dir = tempfile::tempdir().unwrap();
        let fake = Fake::with_records(Kind::Model, "gw", &keys(2), 2);
        let control = ParticipantHost::new(fake.clone(), HostConfig::new(dir.path())).unwrap();
        let base = serve(Arc::new(control)).await;
        let client = HttpParticipant::new(&base, TOKEN).unwrap();
        let ids = 3;
        let run = async {
            let tasks: Vec<_> = (0..6)
                .map(|i| tokio::spawn(one_controller(client.clone(), seed * 100 + i, ids)))
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            // Resume whatever is still open.
            while let Some(id) = client.status().await.unwrap().checkpoint {
                client
                    .resume(ResumeRequest {
                        checkpoint: id,
                        timeout_ms: 10_000,
                    })
                    .await
                    .unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("no call may hang");
        let status = client.status().await.unwrap();
        assert_eq!(status.phase, Phase::Idle, "seed {seed}");
        let calls = fake.calls();
        let closes = calls.iter().filter(|c| c.starts_with("close")).count();
        let opens = calls.iter().filter(|c| *c == "open").count();
        assert!(closes > 0, "seed {seed}: no checkpoint ever opened");
        assert!(
            opens >= closes,
            "seed {seed}: {closes} closes, {opens} opens"
        );
        assert!(fake.is_open(), "seed {seed}: left closed");
    }
}
