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

#[test]
fn an_invalid_log_level_is_refused_at_start_with_the_valid_ones_listed() {
    let (code, stderr) = start_refused("log_level = \"verbose\"\n", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("log level `verbose` is not valid"),
        "{stderr}"
    );
    assert!(
        stderr.contains("off, error, warn, info, debug, trace"),
        "{stderr}"
    );

    let (code, stderr) = start_refused("", &["--log-level", "loud"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("log level `loud` is not valid"), "{stderr}");

    // A tracing filter is still a valid level.
    let node = TestNode::start_logging("", &["--log-level", "warn,netaccel_node=debug"]);
    assert_eq!(node.get_json("/health")["status"], "ok");
    // `info` lines of the node pass the filter although the default level is `warn`.
    assert!(
        node.log().contains("netaccel node listening"),
        "{}",
        node.log()
    );
}
