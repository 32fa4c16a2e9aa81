//! The worker's input file under hostile bytes: random bytes and random
//! mutations of a valid input never panic, and every error names the file.

use std::path::Path;

use proptest::prelude::*;
use rollpoint_testkit::fuzz::hostile;
use rollpoint_worker::input::parse;

const INPUT: &str = r#"{"v":1,"rollout_id":"r-1","task":{"prompt":"fix it"},"model":{"base_url":"http://127.0.0.1:1/v1","api":"chat_completions","name":"m"},"limits":{"max_model_calls":5,"wall_clock_secs":60,"tool_timeout_secs":10},"workdir":"/workspace"}"#;

proptest! {
    #[test]
    fn inputs_never_panic(bytes in hostile(INPUT.as_bytes().to_vec())) {
        if let Err(e) = parse(Path::new("input.json"), &bytes) {
            prop_assert!(e.to_string().contains("input.json"), "{e}");
        }
    }
}

#[test]
fn the_valid_input_parses() {
    parse(Path::new("input.json"), INPUT.as_bytes()).expect("valid");
}
