//! Black-box test of the ICD: C programs built against `-lOpenCL` run once on the local
//! OpenCL platform and once through `libnetaccel_opencl.so` and a service started in this
//! process; their outputs must be byte-identical.
//!
//! Needs gcc, the OpenCL headers, the ICD loader and one OpenCL platform (PoCL); without
//! them the test says so and passes without checking anything.

use std::path::{Path, PathBuf};
use std::process::Command;

use ocl_remote::service::{spawn, ServiceConfig, ServiceHandle};
use prometheus_client::registry::Registry;

struct Fixture {
    _service: ServiceHandle,
    node: String,
    dir: PathBuf,
    vendors_local: PathBuf,
    vendors_net: PathBuf,
}

/// The cdylib cargo built with this test: `cargo test` leaves it in `deps/` beside the
/// test binary (`cargo build` also copies it one level up).
fn icd_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .expect("deps directory")
        .join("libnetaccel_opencl.so")
}

fn fixture(name: &str) -> Option<Fixture> {
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("SKIP: gcc not found");
        return None;
    }
    let local_icds: Vec<PathBuf> = std::fs::read_dir("/etc/OpenCL/vendors")
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| !p.ends_with("netaccel.icd"))
                .collect()
        })
        .unwrap_or_default();
    if local_icds.is_empty() {
        eprintln!("SKIP: no OpenCL platform installed (/etc/OpenCL/vendors is empty)");
        return None;
    }
    let service = match spawn(
        "127.0.0.1:0".parse().unwrap(),
        ServiceConfig::default(),
        &mut Registry::default(),
    ) {
        Ok(s) if !s.device_names().is_empty() => s,
        Ok(_) => {
            eprintln!("SKIP: the OpenCL runtime has no device");
            return None;
        }
        Err(e) => {
            eprintln!("SKIP: no OpenCL runtime: {e}");
            return None;
        }
    };
    let lib = icd_library();
    assert!(lib.exists(), "{} not built", lib.display());
    let dir = std::env::temp_dir().join(format!("netaccel-ocl-{name}-{}", std::process::id()));
    let vendors_local = dir.join("vendors-local");
    let vendors_net = dir.join("vendors-net");
    std::fs::create_dir_all(&vendors_local).unwrap();
    std::fs::create_dir_all(&vendors_net).unwrap();
    for icd in local_icds {
        std::fs::copy(&icd, vendors_local.join(icd.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        vendors_net.join("netaccel.icd"),
        format!("{}\n", lib.display()),
    )
    .unwrap();
    let node = service.local_addr().to_string();
    Some(Fixture {
        _service: service,
        node,
        dir,
        vendors_local,
        vendors_net,
    })
}

fn build_c(fx: &Fixture, program: &str) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let exe = fx.dir.join(program);
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src_dir.join(format!("{program}.c")))
        .args(["-lOpenCL", "-lpthread"])
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {program}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run(fx: &Fixture, exe: &Path, vendors: &Path) -> Vec<u8> {
    let out = Command::new(exe)
        .env("OCL_ICD_VENDORS", vendors)
        .env(ocl_remote::NODES_ENV, &fx.node)
        .output()
        .expect("run test program");
    assert!(
        out.status.success(),
        "{} with {} failed: {}\nstdout:\n{}\nstderr:\n{}",
        exe.display(),
        vendors.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn compare(program: &str) {
    let Some(fx) = fixture(program) else { return };
    let exe = build_c(&fx, program);
    let local = run(&fx, &exe, &fx.vendors_local);
    let remote = run(&fx, &exe, &fx.vendors_net);
    assert!(!local.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&local),
        String::from_utf8_lossy(&remote),
        "{program}: output differs between local and remote"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[test]
fn vadd_is_identical_local_and_remote() {
    compare("vadd");
}
