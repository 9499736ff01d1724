//! What the ICD's test programs share: how a test reacts to a missing prerequisite.

use std::io::Write;

/// A prerequisite of the calling test is missing (`what` names it: gcc, an OpenCL
/// platform, clinfo, pyopencl). In CI (`CI=true`), where every prerequisite is
/// installed, that is a failure; elsewhere the test is skipped, and says why on the
/// terminal (written past the test harness's capture of `eprintln!`, which would hide
/// it for a test that passes).
pub fn missing_prerequisite(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and a prerequisite of this test is missing: {what}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIP: {what} (with CI=true this is a failure)"
    );
}
