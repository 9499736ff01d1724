//! Black-box tests of what a new user tripped over (issue "product polish"): start-up
//! checks of the configuration, metrics that count every refusal, HTTP details (HEAD,
//! Host, Location, `Connection: close`, early end of input) and the node's logs.

mod common;

use common::*;

#[test]
fn an_empty_admin_token_or_slot_list_is_refused_at_start() {
    let (code, stderr) = start_refused("admin_token = \"\"\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("admin_token is empty"), "{stderr}");

    let (code, stderr) = start_refused("slots = []\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("slots = [] configures no slot"), "{stderr}");
}
