//! Publish: `checkpoint.json` then `LATEST`, or with a checkpoint store its
//! next publish marker (`LATEST` following locally), then retention.

use super::{Coordinator, blocking};
use crate::errors::StoreError;
use crate::store::{self, CheckpointDoc};

impl Coordinator {
    /// Publishes `doc` (every share is written) and prunes. Returns the ids
    /// retention removed here.
    pub(super) async fn publish(&self, doc: &CheckpointDoc) -> Result<Vec<String>, StoreError> {
        let run_dir = self.config.run_dir.clone();
        let keep = self.config.keep;
        let Some(remote) = &self.config.remote else {
            let doc = doc.clone();
            return blocking(move || {
                store::publish(&run_dir, &doc)?;
                store::prune(&run_dir, keep)
            })
            .await;
        };
        {
            let (run_dir, doc) = (run_dir.clone(), doc.clone());
            blocking(move || store::write_doc(&run_dir, &doc)).await?;
        }
        let mut seq = self.published_seq.lock().await;
        let marker = store::remote::publish(remote, &run_dir, doc, *seq).await?;
        *seq = Some(marker);
        drop(seq);
        // Published: what is left only follows the store, and a failure of it
        // is mended by the next fetch or prune.
        let id = doc.id.clone();
        let local = blocking(move || {
            store::point_latest(&run_dir, &id)?;
            let pruned = store::prune(&run_dir, keep)?;
            Ok((pruned, store::local_ids(&run_dir)?))
        })
        .await;
        let (pruned, kept) = match local {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(checkpoint = %doc.id, marker, error = %e, "published in the checkpoint store; the local copy did not follow");
                return Ok(Vec::new());
            }
        };
        if let Err(e) = store::remote::prune(remote, &kept, self.config.keep).await {
            tracing::warn!(checkpoint = %doc.id, error = %e, "pruning the checkpoint store failed");
        }
        Ok(pruned)
    }
}
