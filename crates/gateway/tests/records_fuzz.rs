//! Ledger records under hostile bytes (they come back from checkpoints on
//! restore): random bytes and random mutations of valid records never
//! panic, and an error names the line.

use proptest::prelude::*;
use rollpoint_gateway::decode_jsonl;
use rollpoint_testkit::fuzz::hostile;

const RECORDS: &str = concat!(
    r#"{"kind":"call","v":1,"call_id":"r-a1#0","capture_key":"r-a1","rollout":"r","attempt":1,"seq":0,"route":"chat","stream":true,"model":"m","request_digest":"d1","conversation_digest":"c","items":["i"],"model_fp":null,"output_fp":null,"parent_call_id":null,"lineage":"root","lineage_reason":"first_turn","status":"replayed","http_status":200,"content_type":null,"error":null,"replayed_from":"r#0","response_digest":"d2","usage":null,"admitted_ms":1,"upstream_ms":null,"first_byte_ms":null,"finished_ms":2,"delivered_ms":null}"#,
    "\n",
    r#"{"kind":"body","v":1,"digest":"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824","base64":"aGVsbG8="}"#,
    "\n"
);

proptest! {
    #[test]
    fn ledger_records_never_panic(bytes in hostile(RECORDS.as_bytes().to_vec())) {
        if let Err(e) = decode_jsonl(&bytes) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

#[test]
fn the_valid_records_decode() {
    assert_eq!(decode_jsonl(RECORDS.as_bytes()).expect("valid").len(), 2);
}
