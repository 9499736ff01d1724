//! `netaccel rtl build` and `netaccel rtl synth` on manifests: a design that builds is
//! put in the cache (and found there the second time), a broken one fails with exit
//! status 2 and the cause, and synthesis prints the resource counts.
//!
//! Needs Verilator and yosys: without them the tests are skipped when CI is unset and
//! fail with CI=true.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tools_present() -> bool {
    let present = Command::new("verilator").arg("--version").output().is_ok()
        && Command::new("yosys").arg("-V").output().is_ok();
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "Verilator and yosys are required in CI"
        );
        eprintln!("SKIP: Verilator or yosys is not installed");
    }
    present
}

/// Runs `netaccel rtl ARGS` with its own cache; exit code, stdout, stderr.
fn rtl(cache: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_netaccel"))
        .arg("rtl")
        .args(args)
        .arg("--cache")
        .arg(cache)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn build_and_synth_a_manifest() {
    if !tools_present() {
        return;
    }
    let cache = std::env::temp_dir().join(format!("netaccel-rtl-cli-{}", std::process::id()));
    let echo = repo().join("rtl/accelerators/echo");
    let echo = echo.to_str().unwrap();

    let (code, out, err) = rtl(&cache, &["build", echo]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("echo: built "), "{out}");
    let (code, out, _) = rtl(&cache, &["build", &format!("{echo}/accelerator.toml")]);
    assert_eq!(code, 0);
    assert!(out.contains("already built, in the cache"), "{out}");

    let (code, out, err) = rtl(&cache, &["synth", echo]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("FF        579"), "{out}");
    assert!(out.contains("modelled partial bitstream"), "{out}");
    let (_, again, _) = rtl(&cache, &["synth", echo]);
    assert!(again.contains("from the cache"), "{again}");

    // A design without m_axis_tuser: refused with the port named.
    let broken = cache.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(
        repo().join("crates/rtl/tests/fixtures/missing_tuser.v"),
        broken.join("missing_tuser.v"),
    )
    .unwrap();
    std::fs::write(
        broken.join("accelerator.toml"),
        "name = \"broken\"\n[output]\nbytes = \"payload_len\"\n[rtl]\n\
         sources = [\"missing_tuser.v\"]\ntop = \"missing_tuser\"\ncycles_max = \"1000\"\n",
    )
    .unwrap();
    let (code, _, err) = rtl(&cache, &["build", broken.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("m_axis_tuser"), "{err}");
    // A manifest without [rtl].
    std::fs::write(
        broken.join("accelerator.toml"),
        "name = \"broken\"\n[output]\nbytes = \"payload_len\"\n[opencl]\nsource = \"missing_tuser.v\"\n\
         kernel = \"k\"\nglobal_size = [\"1\"]\nargs = []\n",
    )
    .unwrap();
    let (code, _, err) = rtl(&cache, &["build", broken.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no [rtl] section"), "{err}");
    std::fs::remove_dir_all(&cache).unwrap();
}
