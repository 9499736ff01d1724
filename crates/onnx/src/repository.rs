//! The model repository: a folder laid out as Triton's, one folder per model,
//!
//! ```text
//! models/
//!   digits/
//!     config.toml        the tensors and max batch (see `config`)
//!     1/model.onnx       a version; the highest number is served
//!   pipeline/
//!     config.toml        an ensemble (`platform = "ensemble"`): no model.onnx
//!   image_preprocess/
//!     config.toml        the image engine (`backend = "image"`): no model.onnx
//! ```
//!
//! A model that cannot be served (no config, a config that does not parse, no version,
//! an ONNX file tract cannot read or whose tensors are not the config's) is reported
//! with its folder and reason and left out; the rest load.

use std::fs;
use std::path::{Path, PathBuf};

use crate::config::{self, ModelConfig, CONFIG_BYTES_MAX};
use crate::model::MODEL_BYTES_MAX;

/// Most models one repository may hold.
pub const MODELS_MAX: usize = 1024;

/// A model found in the repository, read but not yet planned (the node gives it an
/// id first).
pub struct Found {
    pub name: String,
    pub version: u64,
    pub folder: PathBuf,
    pub onnx: Vec<u8>,
    pub config_text: Vec<u8>,
    pub config: ModelConfig,
    /// Each labelled output's labels, one a line of its label file.
    pub labels: Vec<(String, Vec<String>)>,
}

/// Largest label file.
pub const LABELS_BYTES_MAX: usize = 1 << 20;

/// What reading a repository gave.
pub struct Scan {
    /// In folder-name order (stable across restarts while the folder does not change).
    pub found: Vec<Found>,
    /// One sentence per model left out: `FOLDER: reason`.
    pub errors: Vec<String>,
}

/// Reads the repository at `dir`. `Err` only when `dir` itself cannot be read.
pub fn scan(dir: &Path) -> Result<Scan, String> {
    let entries =
        fs::read_dir(dir).map_err(|e| format!("model repository {}: {e}", dir.display()))?;
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        // Hidden folders (`.git`, an editor's) are not models.
        .filter(|p| {
            p.is_dir()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    folders.sort();
    let mut scan = Scan {
        found: Vec::new(),
        errors: Vec::new(),
    };
    if folders.len() > MODELS_MAX {
        scan.errors.push(format!(
            "{}: {} model folders, only the first {MODELS_MAX} are read",
            dir.display(),
            folders.len()
        ));
        folders.truncate(MODELS_MAX);
    }
    for folder in folders {
        match read_model(&folder) {
            Ok(found) => scan.found.push(found),
            Err(e) => scan.errors.push(format!("{}: {e}", folder.display())),
        }
    }
    Ok(scan)
}

fn read_model(folder: &Path) -> Result<Found, String> {
    let name = folder
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| valid_name(n))
        .ok_or("a model's folder name is its name: letters, digits, `_`, `-` or `.`")?
        .to_string();
    let config_path = folder.join("config.toml");
    let config_text = read_bounded(&config_path, CONFIG_BYTES_MAX)?;
    let text = std::str::from_utf8(&config_text).map_err(|_| "config.toml: not UTF-8")?;
    let config = config::parse(&name, text).map_err(|e| format!("config.toml: {e}"))?;
    if config.ensemble.is_some() || config.image.is_some() {
        // An ensemble runs other models, the image engine is the node's own: no ONNX
        // file (Triton's has an empty `1/`).
        let labels = read_labels(folder, &config)?;
        return Ok(Found {
            name,
            version: 1,
            folder: folder.to_path_buf(),
            onnx: Vec::new(),
            config_text,
            config,
            labels,
        });
    }
    let version = fs::read_dir(folder)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .filter(|e| e.path().join("model.onnx").is_file())
        .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .ok_or("no version folder with a model.onnx (NAME/1/model.onnx)")?;
    let onnx = read_bounded(
        &folder.join(version.to_string()).join("model.onnx"),
        MODEL_BYTES_MAX,
    )?;
    let labels = read_labels(folder, &config)?;
    Ok(Found {
        name,
        version,
        folder: folder.to_path_buf(),
        onnx,
        config_text,
        config,
        labels,
    })
}

/// Each labelled output's labels (its label file in `folder`, one label a line).
fn read_labels(folder: &Path, config: &ModelConfig) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut labels = Vec::with_capacity(config.label_files.len());
    for (output, file) in &config.label_files {
        let text = read_bounded(&folder.join(file), LABELS_BYTES_MAX)?;
        let text = String::from_utf8(text).map_err(|_| format!("{file}: not UTF-8"))?;
        labels.push((output.clone(), text.lines().map(str::to_string).collect()));
    }
    Ok(labels)
}

/// A model name is a URL path segment and a log field as it is.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn read_bounded(path: &Path, max: usize) -> Result<Vec<u8>, String> {
    let file_name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let len = fs::metadata(path)
        .map_err(|e| format!("{file_name}: {e}"))?
        .len();
    if len > max as u64 {
        return Err(format!("{file_name}: {len} bytes, more than {max}"));
    }
    fs::read(path).map_err(|e| format!("{file_name}: {e}"))
}
