//! `netaccel rtl`: RTL accelerators on this machine, without a node (`docs/rtl.md`).
//!
//! `build` compiles a manifest's design ahead of time into the cache the node loads
//! from, so that the node's first load of it is immediate and a broken design is found
//! at the desk; `synth` estimates what it would take on an FPGA with yosys.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use netaccel_rtl::{compile, default_cache_dir, synth_cached, DesignSource};

/// Longest a build may take.
const BUILD_TIME_MAX: Duration = Duration::from_secs(1800);

#[derive(Subcommand, Debug)]
pub enum RtlCommand {
    /// Compile a manifest's [rtl] design into the node's build cache (Verilator).
    Build {
        /// The accelerator's folder, or its accelerator.toml.
        manifest: PathBuf,
        /// The build cache (default: $NETACCEL_RTL_CACHE, else
        /// $XDG_CACHE_HOME/netaccel/rtl, else ~/.cache/netaccel/rtl).
        #[arg(long, value_name = "DIR")]
        cache: Option<PathBuf>,
    },
    /// Estimate a manifest's design on an FPGA: yosys synth_xilinx, LUT/FF/BRAM/DSP.
    Synth {
        /// The accelerator's folder, or its accelerator.toml.
        manifest: PathBuf,
        /// yosys's synth_xilinx part family (xcup: UltraScale+; xcu, xc7, …).
        #[arg(long, default_value = "xcup")]
        family: String,
        /// Where the result is kept for the node's reconfiguration model (default: the
        /// build cache).
        #[arg(long, value_name = "DIR")]
        cache: Option<PathBuf>,
    },
}

/// The manifest's name and design.
fn design(manifest: &Path) -> Result<(String, DesignSource), String> {
    let dir = if manifest
        .file_name()
        .is_some_and(|n| n == manifest::MANIFEST_FILE)
    {
        manifest.parent().unwrap_or(Path::new("."))
    } else {
        manifest
    };
    let m = manifest::load(dir).map_err(|e| e.to_string())?;
    let rtl = m.rtl.ok_or_else(|| {
        format!(
            "{}: rtl: the manifest has no [rtl] section",
            m.file.display()
        )
    })?;
    Ok((
        m.name,
        DesignSource {
            files: rtl.sources,
            top: rtl.top,
        },
    ))
}

pub fn run(command: RtlCommand) -> Result<(), String> {
    match command {
        RtlCommand::Build { manifest, cache } => {
            let (name, source) = design(&manifest)?;
            let cache = cache.unwrap_or_else(default_cache_dir);
            let built =
                compile(&source, &cache, BUILD_TIME_MAX).map_err(|e| format!("{name}: {e}"))?;
            println!(
                "{name}: {} {} in {:.1} s",
                if built.cached {
                    "already built, in the cache:"
                } else {
                    "built"
                },
                built.library.display(),
                built.elapsed.as_secs_f64()
            );
            Ok(())
        }
        RtlCommand::Synth {
            manifest,
            family,
            cache,
        } => {
            let (name, source) = design(&manifest)?;
            let cache = cache.unwrap_or_else(default_cache_dir);
            let (r, cached) =
                synth_cached(&source, &family, &cache).map_err(|e| format!("{name}: {e}"))?;
            println!(
                "{name} (yosys synth_xilinx -family {family}, out of context{})",
                if cached { ", from the cache" } else { "" }
            );
            println!("  LUT       {}", r.lut);
            if r.lutram > 0 {
                println!("  LUTRAM    {}", r.lutram);
            }
            println!("  FF        {}", r.ff);
            println!("  BRAM36    {}", r.bram36);
            if r.uram > 0 {
                println!("  URAM      {}", r.uram);
            }
            println!("  DSP       {}", r.dsp);
            println!(
                "  modelled partial bitstream {} bytes",
                r.partial_bitstream_bytes()
            );
            Ok(())
        }
    }
}
