//! The owner's parsers of untrusted input under hostile bytes: session
//! records (they come back from checkpoints) and tasks (request bodies).
//! Random bytes and random mutations never panic; an error names a field.

use proptest::prelude::*;
use rollpoint_owner::{OwnerTask, SessionRecord};
use rollpoint_testkit::fuzz::hostile;

const TASK: &str = r#"{"id":"t1","sandbox":{"workdir":"/workspace"},"files":{"a.txt":"x","/etc/b":"y"},"setup":[["true"]],"setup_timeout_s":10,"verify":{"command":["sh","-c","test -f a.txt"],"timeout_s":5,"reward":"json"},"capture":true}"#;

fn record() -> Vec<u8> {
    format!(
        r#"{{"v":1,"session":"s1","task":{TASK},"snapshot":"c1--s1","sandbox":"sb1","spec":{{"workdir":"/workspace"}},"workdir":"/workspace","checkpoint":"c1"}}"#
    )
    .into_bytes()
}

proptest! {
    #[test]
    fn session_records_never_panic(bytes in hostile(record())) {
        if let Err(e) = SessionRecord::decode(&bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn tasks_never_panic(bytes in hostile(TASK.as_bytes().to_vec())) {
        if let Ok(task) = rollpoint_owner::decode::decode_json::<OwnerTask>(&bytes) {
            let _ = task.validate();
        }
    }
}

#[test]
fn the_valid_record_decodes() {
    SessionRecord::decode(&record()).expect("valid");
}
