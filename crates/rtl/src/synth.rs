//! What a design would cost on an FPGA: yosys `synth_xilinx` for an UltraScale+ part.
//!
//! The design is synthesised out of context, as a partially reconfigurable region sees
//! it: no I/O buffers and no clock buffer (`-noiopad -noclkbuf`), the shell owns those.
//! The counts come from yosys's `stat -json`. They are a pre-placement estimate: Vivado
//! would pack and optimise further (yosys keeps inverters as separate cells, for one), so
//! they are an estimate in the right order of magnitude, not a utilisation report.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use std::process::Command;

use crate::DesignSource;

/// Resource counts of a synthesised design.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources {
    /// Logic LUTs (LUT1..LUT6). yosys also leaves inverters (`INV` in `cells`) that
    /// place-and-route folds into the LUTs and flip-flops they drive; they are not
    /// counted here.
    pub lut: u64,
    /// LUTs used as memory (distributed RAM, shift registers).
    pub lutram: u64,
    /// Flip-flops.
    pub ff: u64,
    /// Block RAM in 36 Kb units (a RAMB18 counts one half).
    pub bram36: f64,
    /// UltraRAM blocks.
    pub uram: u64,
    /// DSP slices.
    pub dsp: u64,
    /// Every cell type yosys reported, with its count.
    pub cells: BTreeMap<String, u64>,
}

impl Resources {
    /// Counts from yosys's `stat -json` output.
    pub fn from_stat_json(text: &str) -> Result<Resources, SynthError> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| SynthError::Output(format!("yosys stat is not JSON: {e}")))?;
        let cells = value
            .pointer("/design/num_cells_by_type")
            .and_then(|v| v.as_object())
            .ok_or_else(|| SynthError::Output("yosys stat has no design cell counts".into()))?;
        let mut r = Resources::default();
        for (name, count) in cells {
            let count = count.as_u64().unwrap_or(0);
            r.cells.insert(name.clone(), count);
            match name.as_str() {
                "LUT1" | "LUT2" | "LUT3" | "LUT4" | "LUT5" | "LUT6" => r.lut += count,
                "RAMB36E2" | "RAMB36E1" => r.bram36 += count as f64,
                "RAMB18E2" | "RAMB18E1" => r.bram36 += count as f64 / 2.0,
                "URAM288" => r.uram += count,
                "DSP48E2" | "DSP48E1" => r.dsp += count,
                n if n.starts_with("FD") => r.ff += count,
                n if n.starts_with("RAM") || n.starts_with("SRL") => r.lutram += count,
                _ => {}
            }
        }
        Ok(r)
    }
}

/// Why synthesis failed.
#[derive(Debug)]
pub enum SynthError {
    Tool(String),
    Design(String),
    Output(String),
}

impl fmt::Display for SynthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SynthError::Tool(m) | SynthError::Output(m) => f.write_str(m),
            SynthError::Design(m) => write!(f, "yosys refused the design: {m}"),
        }
    }
}

impl std::error::Error for SynthError {}

/// The device the partial-bitstream model scales from: a Virtex UltraScale+ VU9P, whose
/// full bitstream is 641,272,864 bits for 1,182,240 LUTs, 2,364,480 flip-flops, 2,160
/// block RAMs (36 Kb) and 6,840 DSP slices (Xilinx UG570, DS923).
const REFERENCE_BITSTREAM_BYTES: f64 = 641_272_864.0 / 8.0;
const REFERENCE_LUT: f64 = 1_182_240.0;
const REFERENCE_FF: f64 = 2_364_480.0;
const REFERENCE_BRAM36: f64 = 2_160.0;
const REFERENCE_DSP: f64 = 6_840.0;

impl Resources {
    /// Modelled size of the partial bitstream of a region just large enough for the
    /// design: the share of the reference device its scarcest resource needs, times
    /// the reference device's full bitstream. Configuration frames cover whole columns
    /// of every resource in a region, so the region's share, not the design's cell
    /// count, is what the bitstream is proportional to.
    pub fn partial_bitstream_bytes(&self) -> u64 {
        let share = (self.lut as f64 / REFERENCE_LUT)
            .max(self.ff as f64 / REFERENCE_FF)
            .max(self.bram36 / REFERENCE_BRAM36)
            .max(self.dsp as f64 / REFERENCE_DSP);
        (share * REFERENCE_BITSTREAM_BYTES).ceil() as u64
    }
}

fn yosys_bin() -> PathBuf {
    std::env::var_os("YOSYS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("yosys"))
}

/// `yosys -V`.
fn yosys_version() -> Result<String, SynthError> {
    let out = Command::new(yosys_bin())
        .arg("-V")
        .output()
        .map_err(|e| SynthError::Tool(format!("cannot run yosys: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn cache_file(
    design: &DesignSource,
    family: &str,
    cache_dir: &Path,
) -> Result<PathBuf, SynthError> {
    let version = yosys_version()?;
    let digest = design.digest(&["netaccel-rtl-synth/1", family, &version]);
    Ok(cache_dir.join(format!("synth-{digest}.json")))
}

/// The resources of `design` from an earlier [`synth_cached`], without running yosys
/// (`None`: never synthesised, or yosys is not installed).
pub fn cached_resources(
    design: &DesignSource,
    family: &str,
    cache_dir: &Path,
) -> Option<Resources> {
    let file = cache_file(design, family, cache_dir).ok()?;
    let text = std::fs::read_to_string(file).ok()?;
    Resources::from_stat_json(&text).ok()
}

/// [`synth`], with the result kept under `cache_dir` by a digest of the design, the
/// family and yosys's version; the flag says whether it came from there.
pub fn synth_cached(
    design: &DesignSource,
    family: &str,
    cache_dir: &Path,
) -> Result<(Resources, bool), SynthError> {
    let file = cache_file(design, family, cache_dir)?;
    if let Ok(text) = std::fs::read_to_string(&file) {
        if let Ok(r) = Resources::from_stat_json(&text) {
            return Ok((r, true));
        }
    }
    let text = run_yosys(design, family)?;
    let r = Resources::from_stat_json(&text)?;
    // A cache that cannot be written only costs the next run a synthesis.
    if std::fs::create_dir_all(cache_dir).is_ok() {
        let partial = file.with_extension(format!("{}.tmp", std::process::id()));
        if std::fs::write(&partial, &text).is_ok() {
            let _ = std::fs::rename(&partial, &file);
        }
    }
    Ok((r, false))
}

/// Synthesises `design` with yosys for `family` (`xcup`: UltraScale+).
pub fn synth(design: &DesignSource, family: &str) -> Result<Resources, SynthError> {
    Resources::from_stat_json(&run_yosys(design, family)?)
}

/// Runs yosys; the text of its `stat -json`.
fn run_yosys(design: &DesignSource, family: &str) -> Result<String, SynthError> {
    let yosys = yosys_bin();
    if family.is_empty() || !family.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(SynthError::Tool(format!(
            "`{family}` is not a yosys part family"
        )));
    }
    design
        .validate()
        .map_err(|e| SynthError::Tool(e.to_string()))?;
    let folder = std::env::temp_dir().join(format!(
        "netaccel-synth-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    design.write_to(&folder).map_err(SynthError::Tool)?;
    // yosys runs in the folder, with the sources by their validated relative names (no
    // quote, `;` or newline can end the script early) and the statistics written
    // beside them.
    let mut script = String::new();
    for (name, _) in &design.files {
        script.push_str(&format!("read_verilog -sv \"{name}\"; "));
    }
    script.push_str(&format!(
        "synth_xilinx -family {family} -noiopad -noclkbuf -top {}; tee -q -o stat.json stat -json",
        design.top,
    ));
    let out = Command::new(&yosys)
        .current_dir(&folder)
        .args(["-q", "-p", &script])
        .output();
    let text = std::fs::read_to_string(folder.join("stat.json"));
    let _ = std::fs::remove_dir_all(&folder);
    let out = out.map_err(|e| SynthError::Tool(format!("cannot run {}: {e}", yosys.display())))?;
    if !out.status.success() {
        let log = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("rror:"))
            .take(5)
            .collect();
        return Err(SynthError::Design(if errors.is_empty() {
            log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        } else {
            errors.join("\n")
        }));
    }
    text.map_err(|e| SynthError::Output(format!("no stat output from yosys: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_types_are_counted_by_resource() {
        let stat = r#"{"design": {"num_cells_by_type": {
            "LUT2": 10, "LUT6": 5, "INV": 2, "FDRE": 30, "FDSE": 1, "RAMB18E2": 3,
            "RAMB36E2": 1, "DSP48E2": 4, "CARRY8": 7, "RAM64M": 2, "SRL16E": 1,
            "MUXF7": 9}}}"#;
        let r = Resources::from_stat_json(stat).unwrap();
        assert_eq!((r.lut, r.ff, r.dsp, r.lutram), (15, 31, 4, 3));
        assert_eq!(r.bram36, 2.5);
        assert_eq!(r.cells["MUXF7"], 9);
        assert!(Resources::from_stat_json("{}").is_err());
        // 2.5 BRAM36 of 2,160 is the scarcest share here.
        let bytes = r.partial_bitstream_bytes();
        assert_eq!(bytes, (2.5 / 2160.0 * 641_272_864.0 / 8.0f64).ceil() as u64);
        let big = Resources {
            lut: 1_182_240,
            ..Resources::default()
        };
        assert_eq!(big.partial_bitstream_bytes(), 80_159_108);
    }
}
