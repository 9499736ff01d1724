//! From Verilog sources to a shared object a slot can load, cached by content.
//!
//! The user's module is never the Verilator top. A generated wrapper,
//! `netaccel_shell`, has the ports of `spec/rtl-accelerators.md` and connects each by
//! name to the user's module. Verilator checks those connections: a port the module
//! lacks, one it has in addition, or one of another width is an error or a warning at
//! the wrapper, and warnings at the wrapper are fatal. The user's own files are waived
//! from lint (a `.vlt` file), so their style warnings do not refuse a design that is
//! correct.
//!
//! The shared object is cached under `cache_dir/<digest>/design.so`; the digest covers
//! everything that goes into it (sources, top, Verilator's version, the shim, the flags),
//! so a changed design gets a new build and an unchanged one is found again after a
//! restart. A build goes into a fresh folder renamed into place when complete, so a
//! crashed or concurrent build never leaves a half-written entry behind.

use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The C ABI shim compiled into every design (see its header comment).
const SHIM_CPP: &str = include_str!("../shim/shim.cpp");

/// Flags for the C++ compiler; part of the digest. The shim's functions are the only
/// symbols exported, and the model binds to its own copy of the Verilator runtime, so
/// that two designs loaded in one process cannot resolve each other's symbols.
const CXX_FLAGS: &str = "-fPIC -fvisibility=hidden -O2";
const LD_FLAGS: &str = "-shared -Wl,-Bsymbolic";

/// Output kept from a failed build: enough for the messages, bounded.
const LOG_BYTES_MAX: usize = 16 * 1024;

/// Verilog identifiers accepted as the top module name (simple identifiers only: the
/// name is written into the generated wrapper).
fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && name.len() <= 128
}

/// What to build: the Verilog/SystemVerilog files and the top module.
#[derive(Clone, Debug)]
pub struct DesignSource {
    /// Each file: its name relative to the design's folder (as a manifest's `[rtl]
    /// sources` gives it; `include` directives resolve against that folder) and its
    /// bytes.
    pub files: Vec<(String, Vec<u8>)>,
    pub top: String,
}

impl DesignSource {
    /// The design made of the files at `paths` (named by their file names).
    pub fn from_paths(paths: &[PathBuf], top: &str) -> Result<DesignSource, CompileError> {
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let bytes = fs::read(path).map_err(|e| {
                CompileError::Input(format!("cannot read source {}: {e}", path.display()))
            })?;
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            files.push((name.into_owned(), bytes));
        }
        Ok(DesignSource {
            files,
            top: top.to_string(),
        })
    }

    /// Checks the names before anything is written: relative, inside the folder.
    pub(crate) fn validate(&self) -> Result<(), CompileError> {
        if !valid_identifier(&self.top) {
            return Err(CompileError::Input(format!(
                "top module `{}` is not a Verilog identifier",
                self.top
            )));
        }
        if self.files.is_empty() {
            return Err(CompileError::Input("no Verilog sources given".into()));
        }
        for (name, _) in &self.files {
            let path = Path::new(name);
            let inside = !name.is_empty()
                && path.is_relative()
                && path
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !inside || name.contains(['"', '\n', ';']) {
                return Err(CompileError::Input(format!(
                    "source name {name:?} must be a plain relative path inside the design's folder"
                )));
            }
        }
        Ok(())
    }

    /// Hex digest of `parts` and every file (name, length, bytes: moving bytes from one
    /// file to another changes it).
    pub(crate) fn digest(&self, parts: &[&str]) -> String {
        let mut digest = Sha256::new();
        let mut part = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(bytes);
        };
        for p in parts {
            part(p.as_bytes());
        }
        part(self.top.as_bytes());
        for (name, bytes) in &self.files {
            part(name.as_bytes());
            part(bytes);
        }
        digest
            .finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Writes the files under `folder`, returning their paths.
    pub(crate) fn write_to(&self, folder: &Path) -> Result<Vec<PathBuf>, String> {
        let mut paths = Vec::with_capacity(self.files.len());
        for (name, bytes) in &self.files {
            let path = folder.join(name);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// A design compiled into a shared object.
#[derive(Clone, Debug)]
pub struct CompiledDesign {
    /// The shared object to [`crate::Design::load`].
    pub library: PathBuf,
    /// Hex digest of everything the build depended on.
    pub digest: String,
    /// Found in the cache rather than built now.
    pub cached: bool,
    /// Time spent building (or looking it up).
    pub elapsed: Duration,
}

/// Why a design could not be compiled.
#[derive(Debug)]
pub enum CompileError {
    /// A source could not be read, or the top module name is not an identifier.
    Input(String),
    /// Verilator or the C++ compiler is not installed or could not be run.
    Tool(String),
    /// The design's ports do not match the RTL interface (the first message about the
    /// generated wrapper, e.g. `Pin not found: 'm_axis_tuser'`).
    Ports(String),
    /// Verilator or the C++ compiler refused the design; the first error lines.
    Design(String),
    /// The build did not finish within its time bound.
    TimedOut(Duration),
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompileError::Input(m) => write!(f, "{m}"),
            CompileError::Tool(m) => write!(f, "{m}"),
            CompileError::Ports(m) => write!(
                f,
                "the top module does not have the ports of the RTL interface \
                 (docs/rtl.md): {m}"
            ),
            CompileError::Design(m) => write!(f, "Verilator refused the design: {m}"),
            CompileError::TimedOut(d) => {
                write!(f, "building the design took longer than {} s", d.as_secs())
            }
        }
    }
}

impl std::error::Error for CompileError {}

/// `$NETACCEL_RTL_CACHE`, else `$XDG_CACHE_HOME/netaccel/rtl`, else
/// `$HOME/.cache/netaccel/rtl`, else a folder under the system's temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NETACCEL_RTL_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("netaccel/rtl");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache/netaccel/rtl");
    }
    std::env::temp_dir().join("netaccel-rtl-cache")
}

fn verilator_bin() -> PathBuf {
    std::env::var_os("VERILATOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("verilator"))
}

/// `verilator --version`, e.g. `Verilator 5.006 2023-01-22 rev (Debian 5.006-3)`.
pub fn verilator_version() -> Result<String, CompileError> {
    let out = Command::new(verilator_bin())
        .arg("--version")
        .output()
        .map_err(|e| CompileError::Tool(format!("cannot run verilator: {e}")))?;
    if !out.status.success() {
        return Err(CompileError::Tool(format!(
            "verilator --version failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The generated top: the spec's ports, each connected by name to the user's module.
fn wrapper(top: &str) -> String {
    const PORTS: [(&str, &str, u32); 13] = [
        ("input", "clk", 1),
        ("input", "rst_n", 1),
        ("input", "s_axis_tdata", 512),
        ("input", "s_axis_tkeep", 64),
        ("input", "s_axis_tlast", 1),
        ("input", "s_axis_tvalid", 1),
        ("output", "s_axis_tready", 1),
        ("output", "m_axis_tdata", 512),
        ("output", "m_axis_tkeep", 64),
        ("output", "m_axis_tlast", 1),
        ("output", "m_axis_tvalid", 1),
        ("input", "m_axis_tready", 1),
        ("output", "m_axis_tuser", 16),
    ];
    let mut text = String::from(
        "// Generated by netaccel: the ports of the RTL interface, connected by name to the\n\
         // accelerator's top module.\nmodule netaccel_shell (\n",
    );
    for (i, (dir, name, width)) in PORTS.iter().enumerate() {
        let range = if *width > 1 {
            format!("[{}:0] ", width - 1)
        } else {
            String::new()
        };
        let comma = if i + 1 < PORTS.len() { "," } else { "" };
        text.push_str(&format!("    {dir} wire {range}{name}{comma}\n"));
    }
    text.push_str(&format!(");\n    {top} accelerator (\n"));
    for (i, (_, name, _)) in PORTS.iter().enumerate() {
        let comma = if i + 1 < PORTS.len() { "," } else { "" };
        text.push_str(&format!("        .{name}({name}){comma}\n"));
    }
    text.push_str("    );\nendmodule\n");
    text
}

static BUILD_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Compiles `design` into a shared object under `cache_dir` (or finds it there), giving
/// up after `time_max`.
pub fn compile(
    design: &DesignSource,
    cache_dir: &Path,
    time_max: Duration,
) -> Result<CompiledDesign, CompileError> {
    let started = Instant::now();
    design.validate()?;
    let wrapper = wrapper(&design.top);
    let version = verilator_version()?;

    let digest = design.digest(&[
        "netaccel-rtl-build/1",
        SHIM_CPP,
        &wrapper,
        &version,
        CXX_FLAGS,
        LD_FLAGS,
    ]);

    let entry = cache_dir.join(&digest);
    let library = entry.join("design.so");
    if library.is_file() {
        return Ok(CompiledDesign {
            library,
            digest,
            cached: true,
            elapsed: started.elapsed(),
        });
    }

    fs::create_dir_all(cache_dir).map_err(|e| {
        CompileError::Tool(format!(
            "cannot create the cache folder {}: {e}",
            cache_dir.display()
        ))
    })?;
    let work = cache_dir.join(format!(
        ".build-{digest}-{}-{}",
        std::process::id(),
        BUILD_SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    let result = build_into(&work, design, &wrapper, time_max);
    let outcome = result.and_then(|()| {
        fs::rename(&work, &entry).or_else(|e| {
            // Another build of the same digest got there first: its result is as good.
            if library.is_file() {
                Ok(())
            } else {
                Err(CompileError::Tool(format!(
                    "cannot move the build into {}: {e}",
                    entry.display()
                )))
            }
        })
    });
    let _ = fs::remove_dir_all(&work);
    outcome.map(|()| CompiledDesign {
        library,
        digest,
        cached: false,
        elapsed: started.elapsed(),
    })
}

fn build_into(
    work: &Path,
    design: &DesignSource,
    wrapper: &str,
    time_max: Duration,
) -> Result<(), CompileError> {
    let io = |what: &str, e: std::io::Error| CompileError::Tool(format!("{what}: {e}"));
    fs::create_dir_all(work).map_err(|e| io("cannot create the build folder", e))?;
    let design_dir = work.join("design");
    let sources = design
        .write_to(&design_dir)
        .map_err(|e| CompileError::Tool(format!("cannot write the sources: {e}")))?;
    let wrapper_path = work.join("netaccel_shell.v");
    fs::write(&wrapper_path, wrapper).map_err(|e| io("cannot write the wrapper", e))?;
    let shim_path = work.join("shim.cpp");
    fs::write(&shim_path, SHIM_CPP).map_err(|e| io("cannot write the shim", e))?;
    // The user's files are waived from lint; the wrapper is not.
    let mut waivers = String::from("`verilator_config\n");
    for source in &sources {
        waivers.push_str(&format!("lint_off -file \"{}\"\n", source.display()));
    }
    let waivers_path = work.join("waivers.vlt");
    fs::write(&waivers_path, waivers).map_err(|e| io("cannot write the lint waivers", e))?;

    let mut command = Command::new(verilator_bin());
    command
        .current_dir(work)
        .args(["--cc", "--exe", "--build", "-j", "2", "-O3"])
        .args(["-Mdir", "obj", "--top-module", "netaccel_shell", "--prefix"])
        .args(["Vshell", "-o", "design.so", "-CFLAGS", CXX_FLAGS])
        .args(["-LDFLAGS", LD_FLAGS]);
    command
        .arg(format!("-I{}", design_dir.display()))
        .arg(&waivers_path)
        .arg(&wrapper_path)
        .args(&sources)
        .arg(&shim_path);
    let log = run_bounded(command, time_max)?;
    if log.success && work.join("obj/design.so").is_file() {
        fs::rename(work.join("obj/design.so"), work.join("design.so"))
            .map_err(|e| io("cannot keep the shared object", e))?;
        // The C++ and object files are not needed any more; the cache keeps the .so
        // and the sources it was built from.
        let _ = fs::remove_dir_all(work.join("obj"));
        return Ok(());
    }
    Err(classify(&log.text))
}

struct ToolLog {
    success: bool,
    text: String,
}

/// Runs `command` with its output captured (bounded), killing it after `time_max`.
fn run_bounded(mut command: Command, time_max: Duration) -> Result<ToolLog, CompileError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CompileError::Tool(format!(
                "cannot run {}: {e} (is Verilator installed?)",
                verilator_bin().display()
            ))
        })?;
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut stream| {
        std::thread::spawn(move || {
            // Keep the last LOG_BYTES_MAX bytes: errors come at the end.
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * LOG_BYTES_MAX {
                    kept.drain(..kept.len() - LOG_BYTES_MAX);
                }
            }
            kept
        })
    })
    .collect();
    let deadline = Instant::now() + time_max;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CompileError::TimedOut(time_max));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(CompileError::Tool(format!("waiting for verilator: {e}"))),
        }
    };
    let mut text = String::new();
    for reader in readers {
        let bytes = reader.join().unwrap_or_default();
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    Ok(ToolLog {
        success: status.success(),
        text,
    })
}

/// The cause of a failed build, from Verilator's or the compiler's output.
fn classify(log: &str) -> CompileError {
    let messages: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("%Error") || l.starts_with("%Warning") || l.contains("error:"))
        .filter(|l| !l.starts_with("%Error: Exiting due to"))
        .collect();
    // Verilator's lines look like `%Error-PINNOTFOUND: /x/netaccel_shell.v:21:9: Pin not
    // found: 'm_axis_tuser'`: what follows the location is the message.
    let message = |line: &str| -> String {
        let mut parts = line.splitn(5, ':');
        let kind = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        match rest.as_slice() {
            [_file, _line, _col, text] => format!("{} ({kind})", text.trim()),
            _ => line.trim().to_string(),
        }
    };
    if let Some(line) = messages.iter().find(|l| l.contains("netaccel_shell.v")) {
        return CompileError::Ports(message(line));
    }
    if messages.is_empty() {
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return CompileError::Design(tail.join("\n"));
    }
    CompileError::Design(
        messages
            .iter()
            .take(5)
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_connects_every_port_by_name() {
        let text = wrapper("my_top");
        assert!(text.contains("    my_top accelerator ("));
        assert!(text.contains("input wire [511:0] s_axis_tdata,"));
        assert!(text.contains("output wire [15:0] m_axis_tuser\n"));
        assert_eq!(text.matches("        .").count(), 13);
    }

    #[test]
    fn top_names_must_be_identifiers() {
        for ok in ["top", "_x", "netaccel_topk", "a$b"] {
            assert!(valid_identifier(ok), "{ok}");
        }
        for bad in ["", "1x", "a b", "x(y", "a;b", "top\n"] {
            assert!(!valid_identifier(bad), "{bad:?}");
        }
    }

    #[test]
    fn wrapper_messages_are_port_errors() {
        let log = "%Warning-PINMISSING: /c/netaccel_shell.v:16:19: Cell has missing pin: 'x'\n\
                   %Error-PINNOTFOUND: /c/netaccel_shell.v:21:72: Pin not found: 'm_axis_tuser'\n\
                   %Error: Exiting due to 1 error(s)\n";
        match classify(log) {
            CompileError::Ports(m) => {
                assert_eq!(m, "Cell has missing pin: 'x' (%Warning-PINMISSING)")
            }
            other => panic!("{other:?}"),
        }
        let log = "%Error: /u/mine.v:3:1: syntax error, unexpected endmodule\n";
        match classify(log) {
            CompileError::Design(m) => assert!(m.contains("syntax error"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
