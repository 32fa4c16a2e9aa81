//! Trajectories as Parquet, one row per segment of the merged view, for trainers that load
//! datasets from Parquet. Written with the `parquet` crate's column writers (no Arrow, no
//! compression codecs compiled in), so the file is uncompressed. The schema carries its
//! version in the file's key-value metadata (`rollpoint.trajectory.v`).
//!
//! ```text
//! message trajectory_segment {
//!   required binary rollout (STRING);
//!   required int32 attempt;
//!   required boolean trainable;
//!   optional binary not_trainable (STRING);   -- the reason, when not trainable
//!   optional double reward;
//!   optional int32 segment;                   -- null: a rollout with no segment
//!   required int32 first_call;
//!   required int32 token_breaks;
//!   required group tokens (LIST) { repeated group list { required int32 element; } }
//!   required group loss_mask (LIST) { repeated group list { required int32 element; } }
//!   optional group logprobs (LIST) { repeated group list { required double element; } }
//!   required group policy_versions (LIST) { repeated group list { required binary element (STRING); } }
//! }
//! ```

use std::sync::Arc;

use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::format::{Reason, TRAJECTORY_VERSION, Trajectory};

const SCHEMA: &str = "
message trajectory_segment {
  required binary rollout (STRING);
  required int32 attempt;
  required boolean trainable;
  optional binary not_trainable (STRING);
  optional double reward;
  optional int32 segment;
  required int32 first_call;
  required int32 token_breaks;
  required group tokens (LIST) { repeated group list { required int32 element; } }
  required group loss_mask (LIST) { repeated group list { required int32 element; } }
  optional group logprobs (LIST) { repeated group list { required double element; } }
  required group policy_versions (LIST) { repeated group list { required binary element (STRING); } }
}";

/// The key of the format version in the file's metadata.
pub const VERSION_KEY: &str = "rollpoint.trajectory.v";

/// A list column being built: values with their definition and repetition levels.
#[derive(Default)]
struct ListColumn<T> {
    values: Vec<T>,
    def: Vec<i16>,
    rep: Vec<i16>,
}

impl<T: Clone> ListColumn<T> {
    /// Appends one row's list (`None`: a null list, for an optional one whose
    /// `present` level is `base`).
    fn push(&mut self, list: Option<&[T]>, base: i16) {
        match list {
            None => {
                self.def.push(0);
                self.rep.push(0);
            }
            Some([]) => {
                self.def.push(base);
                self.rep.push(0);
            }
            Some(items) => {
                for (i, v) in items.iter().enumerate() {
                    self.values.push(v.clone());
                    self.def.push(base + 1);
                    self.rep.push(i16::from(i > 0));
                }
            }
        }
    }
}

fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::NoCalls => "no_calls",
        Reason::NotFinished => "not_finished",
        Reason::UnansweredCall => "unanswered_call",
        Reason::UnresolvedLineage => "unresolved_lineage",
        Reason::MissingTokens => "missing_tokens",
        Reason::CaptureError => "capture_error",
        Reason::TokenBreak => "token_break",
        Reason::InfraError => "infra_error",
        Reason::PolicyVersions => "policy_versions",
    }
}

fn int(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The trajectories as a Parquet file's bytes.
pub fn write(all: &[Trajectory]) -> Result<Vec<u8>, String> {
    let err = |e: parquet::errors::ParquetError| format!("parquet: {e}");
    let schema = Arc::new(parse_message_type(SCHEMA).map_err(err)?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_key_value_metadata(Some(vec![KeyValue::new(
                VERSION_KEY.to_owned(),
                TRAJECTORY_VERSION.to_string(),
            )]))
            .build(),
    );
    let mut rollout = Vec::new();
    let mut attempt = Vec::new();
    let mut trainable = Vec::new();
    let (mut why, mut why_def) = (Vec::new(), Vec::new());
    let (mut reward, mut reward_def) = (Vec::new(), Vec::new());
    let (mut segment, mut segment_def) = (Vec::new(), Vec::new());
    let mut first_call = Vec::new();
    let mut breaks = Vec::new();
    let mut tokens = ListColumn::<i32>::default();
    let mut mask = ListColumn::<i32>::default();
    let mut logprobs = ListColumn::<f64>::default();
    let mut versions = ListColumn::<ByteArray>::default();
    for t in all {
        let rows: Vec<Option<(usize, &crate::format::Segment)>> = if t.segments.is_empty() {
            vec![None]
        } else {
            t.segments.iter().enumerate().map(Some).collect()
        };
        for row in rows {
            rollout.push(ByteArray::from(t.rollout.as_str()));
            attempt.push(i32::try_from(t.attempt).unwrap_or(i32::MAX));
            trainable.push(t.trainable);
            match &t.not_trainable {
                Some(n) => {
                    why.push(ByteArray::from(reason_name(n.reason)));
                    why_def.push(1);
                }
                None => why_def.push(0),
            }
            match t.reward {
                Some(r) => {
                    reward.push(r);
                    reward_def.push(1);
                }
                None => reward_def.push(0),
            }
            breaks.push(int(t.token_breaks.len()));
            match row {
                Some((i, seg)) => {
                    segment.push(int(i));
                    segment_def.push(1);
                    first_call.push(int(seg.first_call));
                    let ids: Vec<i32> = seg
                        .tokens
                        .iter()
                        .map(|&x| i32::try_from(x).unwrap_or(i32::MAX))
                        .collect();
                    tokens.push(Some(&ids), 0);
                    let m: Vec<i32> = seg.loss_mask.iter().map(|&x| i32::from(x)).collect();
                    mask.push(Some(&m), 0);
                    logprobs.push(seg.logprobs.as_deref(), 1);
                    let v: Vec<ByteArray> = seg
                        .policy_versions
                        .iter()
                        .map(|v| ByteArray::from(v.as_str()))
                        .collect();
                    versions.push(Some(&v), 0);
                }
                None => {
                    segment_def.push(0);
                    first_call.push(0);
                    tokens.push(Some(&[]), 0);
                    mask.push(Some(&[]), 0);
                    logprobs.push(None, 1);
                    versions.push(Some(&[]), 0);
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut out, schema, props).map_err(err)?;
    let mut group = writer.next_row_group().map_err(err)?;
    let mut index = 0;
    while let Some(mut col) = group.next_column().map_err(err)? {
        match index {
            0 => col
                .typed::<ByteArrayType>()
                .write_batch(&rollout, None, None),
            1 => col.typed::<Int32Type>().write_batch(&attempt, None, None),
            2 => col.typed::<BoolType>().write_batch(&trainable, None, None),
            3 => col
                .typed::<ByteArrayType>()
                .write_batch(&why, Some(&why_def), None),
            4 => col
                .typed::<DoubleType>()
                .write_batch(&reward, Some(&reward_def), None),
            5 => col
                .typed::<Int32Type>()
                .write_batch(&segment, Some(&segment_def), None),
            6 => col
                .typed::<Int32Type>()
                .write_batch(&first_call, None, None),
            7 => col.typed::<Int32Type>().write_batch(&breaks, None, None),
            8 => col.typed::<Int32Type>().write_batch(
                &tokens.values,
                Some(&tokens.def),
                Some(&tokens.rep),
            ),
            9 => {
                col.typed::<Int32Type>()
                    .write_batch(&mask.values, Some(&mask.def), Some(&mask.rep))
            }
            10 => col.typed::<DoubleType>().write_batch(
                &logprobs.values,
                Some(&logprobs.def),
                Some(&logprobs.rep),
            ),
            _ => col.typed::<ByteArrayType>().write_batch(
                &versions.values,
                Some(&versions.def),
                Some(&versions.rep),
            ),
        }
        .map_err(err)?;
        col.close().map_err(err)?;
        index += 1;
    }
    group.close().map_err(err)?;
    writer.close().map_err(err)?;
    Ok(out)
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::{Field, List, RowAccessor};

    use super::*;
    use crate::format::{Metrics, NotTrainable, Segment};

    fn traj(id: &str, segments: Vec<Segment>, why: Option<Reason>) -> Trajectory {
        Trajectory {
            v: TRAJECTORY_VERSION,
            rollout: id.into(),
            attempt: 1,
            trainable: why.is_none(),
            not_trainable: why.map(|reason| NotTrainable {
                reason,
                call_id: None,
                message: String::new(),
            }),
            reward: Some(0.5),
            passed: Some(true),
            group: None,
            infra_class: None,
            calls: Vec::new(),
            token_breaks: Vec::new(),
            segments,
            metrics: Metrics::default(),
        }
    }

    fn ints(l: &List) -> Vec<i64> {
        l.elements()
            .iter()
            .map(|f| match f {
                Field::Int(x) => i64::from(*x),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn segments_are_rows_and_read_back_as_written() {
        let seg = |first_call, tokens: Vec<u32>, logprobs| Segment {
            first_call,
            loss_mask: tokens.iter().map(|t| u8::from(t % 2 == 1)).collect(),
            tokens,
            logprobs,
            policy_versions: vec!["v1".to_owned(), "v2".to_owned()],
        };
        let all = vec![
            traj(
                "a",
                vec![
                    seg(0, vec![1, 2, 3], Some(vec![0.0, 0.0, -0.5])),
                    seg(2, vec![4, 5], None),
                ],
                None,
            ),
            traj("b", Vec::new(), Some(Reason::NoCalls)),
        ];
        let bytes = write(&all).unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let meta = reader.metadata().file_metadata();
        let kv = meta.key_value_metadata().unwrap();
        assert!(
            kv.iter()
                .any(|k| k.key == VERSION_KEY && k.value.as_deref() == Some("1"))
        );
        let rows: Vec<parquet::record::Row> = reader
            .get_row_iter(None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].get_string(0).unwrap(), "a");
        assert_eq!(ints(rows[0].get_list(8).unwrap()), [1, 2, 3]);
        assert_eq!(ints(rows[0].get_list(9).unwrap()), [1, 0, 1]);
        assert_eq!(rows[0].get_list(10).unwrap().elements().len(), 3);
        assert_eq!(rows[1].get_int(5).unwrap(), 1);
        assert!(matches!(
            rows[1].get_column_iter().nth(10),
            Some((_, Field::Null))
        ));
        assert_eq!(rows[2].get_string(3).unwrap(), "no_calls");
        assert!(matches!(
            rows[2].get_column_iter().nth(5),
            Some((_, Field::Null))
        ));
        assert!(ints(rows[2].get_list(8).unwrap()).is_empty());
        let versions: Vec<String> = rows[0]
            .get_list(11)
            .unwrap()
            .elements()
            .iter()
            .map(|f| match f {
                Field::Str(s) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(versions, ["v1", "v2"]);
    }
}
