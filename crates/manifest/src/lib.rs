//! Accelerator manifests: the `accelerator.toml` with which users add accelerators to
//! a node without rebuilding it (`spec/accelerator-manifest.md`, user guide
//! `docs/opencl-slots.md`).
//!
//! This crate parses and validates a manifest and everything it names, and nothing
//! more: it reads the folder it is given, and never builds an OpenCL program or runs
//! a simulator. The node's device backends consume the result — the OpenCL backend
//! the [`OpenCl`] section, the RTL backend the [`Rtl`] section — so every rule of the
//! format lives here once, and a backend never re-checks a manifest.
//!
//! * [`load_dir`] loads every `DIR/*/accelerator.toml`, returning the valid manifests
//!   and, for each refused one, a [`ManifestError`] naming the file, the field and the
//!   reason; one bad manifest never stops the others.
//! * [`expr`] is the size-expression language (`payload_len / 4`, `ceil_div(n, 64)`):
//!   a pure, bounded parser and an evaluator that reports overflow.
//! * [`ManifestAccelerator`] is a manifest as an [`accel::Accelerator`]: the catalog
//!   entry with the manifest's parameter schema, payload rules and output size, whose
//!   checks front ends run before a call reaches a slot.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("manifest-doc-{}", std::process::id()));
//! std::fs::create_dir_all(dir.join("xorbytes")).unwrap();
//! std::fs::write(dir.join("xorbytes/xorbytes.cl"), "kernel void xorbytes() {}").unwrap();
//! std::fs::write(dir.join("xorbytes/accelerator.toml"), r#"
//!     name = "xorbytes"
//!     [[params]]
//!     name = "key"
//!     type = "u32"
//!     offset = 0
//!     [output]
//!     bytes = "payload_len"
//!     [opencl]
//!     source = "xorbytes.cl"
//!     kernel = "xorbytes"
//!     global_size = ["payload_len"]
//!     args = ["payload", "output", "key", "payload_len"]
//! "#).unwrap();
//! let loaded = manifest::load_dir(&dir).unwrap();
//! assert!(loaded.errors.is_empty());
//! assert_eq!(loaded.manifests[0].name, "xorbytes");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use accel::ParamSpec;
use sha2::{Digest, Sha256};

mod accelerator;
pub mod expr;
pub mod fuzzing;
mod schema;

pub use accelerator::ManifestAccelerator;
pub use expr::{Env, EvalError, Expr, Var};
pub use schema::PAYLOAD_MAX_BYTES_DEFAULT;

/// The manifest's file name inside each accelerator folder.
pub const MANIFEST_FILE: &str = "accelerator.toml";
/// Largest manifest read.
pub const MANIFEST_BYTES_MAX: u64 = 64 * 1024;
/// Largest implementation file read (an FPGA binary can be large).
pub const IMPLEMENTATION_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Accelerator folders one directory may hold.
pub const MANIFESTS_MAX: usize = 1024;
/// Kernel arguments an `[opencl]` section may list.
pub const ARGS_MAX: usize = 64;
/// Lowest id a manifest accelerator may have (below: built-ins).
pub const ID_MIN: u16 = 256;
/// Highest id a manifest accelerator may have (65535 is reserved).
pub const ID_MAX: u16 = 65534;

/// A validated manifest with its implementation files read.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub name: String,
    /// The fixed id, if the manifest gives one (else the node assigns one).
    pub id: Option<u16>,
    pub description: String,
    /// Parameter schema: names, types, offsets, defaults and bounds, validated
    /// (aligned, inside the block, not overlapping, defaults within bounds).
    pub params: Vec<ParamSpec>,
    pub payload: Payload,
    /// `[output] bytes`: the output size (for RTL, an upper bound).
    pub output_bytes: Expr,
    pub opencl: Option<OpenCl>,
    pub rtl: Option<Rtl>,
    /// Hex digest of the manifest and every implementation file it names.
    pub hash: String,
    /// The accelerator's folder.
    pub dir: PathBuf,
    /// The manifest file.
    pub file: PathBuf,
}

/// `[payload]`: the layout rule of a call's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payload {
    pub multiple_of: u64,
    pub max_bytes: u64,
}

/// Whether `[opencl]` names OpenCL C source or an offline-compiled binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramKind {
    Source,
    Binary,
}

/// `[opencl]`: how an OpenCL slot runs the accelerator.
#[derive(Clone, Debug)]
pub struct OpenCl {
    pub kind: ProgramKind,
    /// The file named by `source` or `binary`, relative to the folder.
    pub file: String,
    /// Its bytes (UTF-8 text for a source).
    pub program: Vec<u8>,
    pub build_options: String,
    pub kernel: String,
    /// 1 to 3 expressions.
    pub global_size: Vec<Expr>,
    /// Empty (the runtime chooses) or as many as `global_size`.
    pub local_size: Vec<Expr>,
    pub args: Vec<Arg>,
}

/// One kernel argument of `[opencl] args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// The payload, a read-only buffer.
    Payload,
    /// The output, a write-only buffer.
    Output,
    /// The payload length, a `u32`.
    PayloadLen,
    /// The output length, a `u32`.
    OutputLen,
    /// The parameter at this index of `params`, as its declared type.
    Param(usize),
    /// Local memory of this many bytes.
    Local(Expr),
}

/// `[rtl]`: how an RTL slot runs the accelerator.
#[derive(Clone, Debug)]
pub struct Rtl {
    /// Each source file: its name relative to the folder, and its bytes.
    pub sources: Vec<(String, Vec<u8>)>,
    /// The top module (ports as in `spec/rtl-accelerators.md`).
    pub top: String,
    /// Cycles after which a call that has not finished is `INTERNAL`.
    pub cycles_max: Expr,
}

impl Manifest {
    /// Which backends this manifest has an implementation for.
    pub fn backends(&self) -> Vec<&'static str> {
        let mut list = Vec::new();
        if self.opencl.is_some() {
            list.push("opencl");
        }
        if self.rtl.is_some() {
            list.push("rtl");
        }
        list
    }
}

/// A manifest that was refused: which file, which field, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    pub field: String,
    pub reason: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.field,
            self.reason
        )
    }
}

impl std::error::Error for ManifestError {}

/// Parses and validates one manifest's text. `file` names it in errors and its
/// folder is where the manifest is; `read` gives the implementation files' bytes by
/// their relative name. Pure apart from `read`; the hash covers `text` and the files.
pub fn parse(
    file: &Path,
    text: &str,
    read: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Manifest, ManifestError> {
    let mut m = schema::validate(text, read).map_err(|e| ManifestError {
        file: file.to_path_buf(),
        field: e.field,
        reason: e.reason,
    })?;
    m.hash = hash(text.as_bytes(), &m);
    m.file = file.to_path_buf();
    m.dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(m)
}

/// Digest of the manifest text and every implementation file, each with its name
/// and length so that moving bytes from one file to another changes it.
fn hash(text: &[u8], m: &Manifest) -> String {
    let mut h = Sha256::new();
    h.update(b"netaccel-accelerator-manifest/1\0");
    let mut part = |name: &str, bytes: &[u8]| {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(MANIFEST_FILE, text);
    if let Some(o) = &m.opencl {
        part(&o.file, &o.program);
    }
    if let Some(r) = &m.rtl {
        for (name, bytes) in &r.sources {
            part(name, bytes);
        }
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads at most `max` bytes of `path`; a larger file is an error.
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".to_string());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    Ok(bytes)
}

/// Loads the manifest of one accelerator folder.
pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
    let file = dir.join(MANIFEST_FILE);
    let refuse = |reason: String| ManifestError {
        file: file.clone(),
        field: "file".to_string(),
        reason,
    };
    let bytes = read_bounded(&file, MANIFEST_BYTES_MAX).map_err(&refuse)?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("not UTF-8 text".to_string()))?;
    parse(&file, &text, &|name| {
        read_bounded(&dir.join(name), IMPLEMENTATION_BYTES_MAX)
    })
}

/// What [`load_dir`] found: valid manifests (in folder-name order) and refusals.
#[derive(Debug, Default)]
pub struct Loaded {
    pub manifests: Vec<Manifest>,
    pub errors: Vec<ManifestError>,
}

/// Loads every `dir/*/accelerator.toml` (folders without one are ignored). A manifest
/// whose name or fixed id repeats an earlier one's (in folder-name order) is refused.
/// `Err` only when `dir` itself cannot be read or holds more than [`MANIFESTS_MAX`]
/// accelerator folders.
pub fn load_dir(dir: &Path) -> Result<Loaded, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read accelerators directory {}: {e}", dir.display()))?;
    let mut folders = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read accelerators directory {}: {e}", dir.display()))?
            .path();
        if path.join(MANIFEST_FILE).exists() {
            folders.push(path);
            if folders.len() > MANIFESTS_MAX {
                return Err(format!(
                    "{} holds more than {MANIFESTS_MAX} accelerator folders",
                    dir.display()
                ));
            }
        }
    }
    folders.sort();
    let mut loaded = Loaded::default();
    for folder in folders {
        match load(&folder) {
            Ok(m) => {
                let clash = loaded.manifests.iter().find_map(|other| {
                    if other.name == m.name {
                        Some((
                            "name",
                            format!("`{}` is also the name of {}", m.name, other.file.display()),
                        ))
                    } else if m.id.is_some() && other.id == m.id {
                        Some((
                            "id",
                            format!(
                                "{} is also the id of {}",
                                m.id.unwrap_or(0),
                                other.file.display()
                            ),
                        ))
                    } else {
                        None
                    }
                });
                match clash {
                    Some((field, reason)) => loaded.errors.push(ManifestError {
                        file: m.file,
                        field: field.to_string(),
                        reason,
                    }),
                    None => loaded.manifests.push(m),
                }
            }
            Err(e) => loaded.errors.push(e),
        }
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests;
