//! `accelerator.toml` as written (serde structures, unknown keys refused) and its
//! validation into a [`Manifest`]: every rule of the manifest format, each failure
//! named by its field.

use std::path::{Component, Path};

use accel::{ParamSpec, ParamType, ParamValue, PARAMS_LEN};
use serde::Deserialize;

use crate::expr::{self, Expr, Var};
use crate::{Arg, Manifest, OpenCl, Payload, ProgramKind, Rtl, ARGS_MAX};

/// Reads an implementation file named by the manifest (a path relative to its folder,
/// already checked to stay inside it).
pub type ReadFile<'a> = &'a dyn Fn(&str) -> Result<Vec<u8>, String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: String,
    id: Option<i64>,
    description: Option<String>,
    #[serde(default)]
    params: Vec<RawParam>,
    payload: Option<RawPayload>,
    output: RawOutput,
    opencl: Option<RawOpenCl>,
    rtl: Option<RawRtl>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    offset: i64,
    default: Option<toml::Value>,
    min: Option<toml::Value>,
    max: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayload {
    multiple_of: Option<i64>,
    max_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    bytes: ExprText,
}

/// An expression: a string, or (as a convenience) a bare integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum ExprText {
    Text(String),
    Int(i64),
}

impl ExprText {
    fn text(&self) -> String {
        match self {
            ExprText::Text(t) => t.clone(),
            ExprText::Int(v) => v.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOpenCl {
    source: Option<String>,
    binary: Option<String>,
    #[serde(default)]
    build_options: String,
    kernel: String,
    global_size: Vec<ExprText>,
    #[serde(default)]
    local_size: Vec<ExprText>,
    args: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRtl {
    sources: Vec<String>,
    top: String,
    cycles_max: ExprText,
}

/// A failed rule: the field and the reason (the file is added by the caller).
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

fn fail<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError {
        field: field.into(),
        reason: reason.into(),
    })
}

/// Default and bound of `[payload]` when the section or a key is left out.
pub const PAYLOAD_MAX_BYTES_DEFAULT: u64 = 16 * 1024 * 1024;
/// The largest `max_bytes`: a RAC payload length is a `u32`.
const PAYLOAD_MAX_BYTES_LIMIT: u64 = u32::MAX as u64;
/// Longest description, build options, kernel or module name.
const TEXT_BYTES_MAX: usize = 4096;
const IDENT_BYTES_MAX: usize = 128;
/// RTL source files a manifest may list.
const SOURCES_MAX: usize = 256;

/// Names the expression language or `args` gives a meaning of their own.
const RESERVED: [&str; 8] = [
    "payload",
    "output",
    "payload_len",
    "output_len",
    "min",
    "max",
    "ceil_div",
    "local",
];

/// Parses and validates the text of an `accelerator.toml`. `read` returns the bytes of
/// an implementation file; everything else is a pure function of `text`.
pub fn validate(text: &str, read: ReadFile<'_>) -> Result<Manifest, FieldError> {
    let raw: RawManifest = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            // serde names the key in its message; otherwise the line says where.
            let named = ["missing field `", "unknown field `"]
                .iter()
                .find_map(|p| e.message().strip_prefix(p))
                .and_then(|rest| rest.split('`').next());
            let field = match (named, e.span()) {
                (Some(key), _) => key.to_string(),
                (None, Some(span)) => {
                    format!("line {}", text[..span.start].matches('\n').count() + 1)
                }
                (None, None) => "toml".to_string(),
            };
            // The parser gives no message for some errors (a control character in a
            // comment, found by fuzzing); the field already says the line.
            let reason = match e.message().trim() {
                "" => "not valid TOML",
                message => message,
            };
            return fail(field, reason.to_string());
        }
    };
    check_name("name", &raw.name, 32)?;
    let id = match raw.id {
        None => None,
        Some(id @ 256..=65534) => Some(id as u16),
        Some(id) => return fail("id", format!("{id} is outside 256..=65534")),
    };
    let description = raw.description.unwrap_or_default();
    if description.len() > TEXT_BYTES_MAX {
        return fail("description", format!("longer than {TEXT_BYTES_MAX} bytes"));
    }
    let params = params(&raw.params)?;
    let payload = payload(raw.payload.as_ref())?;
    let output_bytes = expression("output.bytes", &raw.output.bytes.text(), &params, false)?;
    let opencl = raw
        .opencl
        .as_ref()
        .map(|o| opencl(o, &params, read))
        .transpose()?;
    let rtl = raw
        .rtl
        .as_ref()
        .map(|r| rtl(r, &params, read))
        .transpose()?;
    if opencl.is_none() && rtl.is_none() {
        return fail(
            "opencl",
            "no implementation: add an [opencl] or an [rtl] section",
        );
    }
    Ok(Manifest {
        name: raw.name,
        id,
        description,
        params,
        payload,
        output_bytes,
        opencl,
        rtl,
        hash: String::new(),
        dir: Default::default(),
        file: Default::default(),
    })
}

/// `[a-z0-9_]{1,max}` (accelerator names); `ident` additionally refuses a leading digit.
fn check_name(field: &str, name: &str, max: usize) -> Result<(), FieldError> {
    let ok_chars = name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    if name.is_empty() || name.len() > max || !ok_chars {
        return fail(
            field,
            format!("{name:?} must be 1 to {max} characters of a-z, 0-9 and _"),
        );
    }
    Ok(())
}

/// A C or Verilog identifier.
fn check_ident(field: &str, name: &str) -> Result<(), FieldError> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_');
    if !first_ok
        || name.len() > IDENT_BYTES_MAX
        || !bytes.all(|c| c.is_ascii_alphanumeric() || c == b'_')
    {
        return fail(
            field,
            format!(
                "{name:?} is not an identifier (letters, digits and _, not starting with a digit)"
            ),
        );
    }
    Ok(())
}

fn params(raw: &[RawParam]) -> Result<Vec<ParamSpec>, FieldError> {
    let mut specs: Vec<ParamSpec> = Vec::with_capacity(raw.len());
    let mut used = [None::<usize>; PARAMS_LEN];
    for (i, p) in raw.iter().enumerate() {
        let field = |key: &str| format!("params[{i}].{key}");
        check_name(&field("name"), &p.name, 32)?;
        if p.name.as_bytes()[0].is_ascii_digit() {
            return fail(
                field("name"),
                format!(
                    "{:?} must not start with a digit (expressions could not name it)",
                    p.name
                ),
            );
        }
        if RESERVED.contains(&p.name.as_str()) {
            return fail(
                field("name"),
                format!(
                    "`{}` is reserved by the expression language and `args`",
                    p.name
                ),
            );
        }
        if let Some(j) = specs.iter().position(|s| s.name == p.name) {
            return fail(
                field("name"),
                format!("`{}` is also the name of params[{j}]", p.name),
            );
        }
        let Some(ty) = ParamType::from_name(&p.ty) else {
            return fail(
                field("type"),
                format!("{:?} is not one of u8, u16, u32, i32, u64, f32", p.ty),
            );
        };
        let size = ty.size();
        let offset = match usize::try_from(p.offset) {
            Ok(o) if o + size <= PARAMS_LEN => o,
            _ => {
                return fail(
                    field("offset"),
                    format!(
                        "{} + {size} bytes does not fit the {PARAMS_LEN}-byte parameter block",
                        p.offset
                    ),
                )
            }
        };
        if offset % size != 0 {
            return fail(
                field("offset"),
                format!(
                    "{offset} is not aligned to the {size}-byte size of {}",
                    ty.as_str()
                ),
            );
        }
        for owner in &mut used[offset..offset + size] {
            if let Some(j) = *owner {
                return fail(
                    field("offset"),
                    format!(
                        "`{}` (bytes {offset}..{}) overlaps params[{j}] `{}`",
                        p.name,
                        offset + size,
                        specs[j].name
                    ),
                );
            }
            *owner = Some(i);
        }
        let value =
            |key: &str, v: &Option<toml::Value>| -> Result<Option<ParamValue>, FieldError> {
                v.as_ref()
                    .map(|v| {
                        param_value(ty, v).ok_or_else(|| FieldError {
                            field: field(key),
                            reason: format!("{v} is not a value of type {}", ty.as_str()),
                        })
                    })
                    .transpose()
            };
        let spec = ParamSpec {
            default: value("default", &p.default)?,
            min: value("min", &p.min)?,
            max: value("max", &p.max)?,
            ..ParamSpec::new(p.name.clone(), ty, offset, None)
        };
        if let (Some(min), Some(max)) = (spec.min, spec.max) {
            if spec.in_range(min).is_err() || spec.in_range(max).is_err() {
                return fail(field("min"), format!("min {min} is greater than max {max}"));
            }
        }
        if let Some(default) = spec.default {
            if let Err(e) = spec.in_range(default) {
                return fail(field("default"), e.to_string());
            }
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// A TOML number as a value of `ty`: integers exactly, floats only for `f32`.
fn param_value(ty: ParamType, v: &toml::Value) -> Option<ParamValue> {
    match (ty, v) {
        (ParamType::F32, toml::Value::Float(f)) if f.is_finite() => {
            Some(ParamValue::F32(*f as f32))
        }
        (_, toml::Value::Integer(i)) => ty.from_i128(i128::from(*i)),
        _ => None,
    }
}

fn payload(raw: Option<&RawPayload>) -> Result<Payload, FieldError> {
    let multiple_of = raw.and_then(|p| p.multiple_of).unwrap_or(1);
    let max_bytes = raw
        .and_then(|p| p.max_bytes)
        .unwrap_or(PAYLOAD_MAX_BYTES_DEFAULT as i64);
    if !(1..=i64::from(u32::MAX)).contains(&multiple_of) {
        return fail(
            "payload.multiple_of",
            format!("{multiple_of} must be at least 1 (and fit 32 bits)"),
        );
    }
    if !(0..=PAYLOAD_MAX_BYTES_LIMIT as i64).contains(&max_bytes) {
        return fail(
            "payload.max_bytes",
            format!("{max_bytes} must be within 0..={PAYLOAD_MAX_BYTES_LIMIT}"),
        );
    }
    Ok(Payload {
        multiple_of: multiple_of as u64,
        max_bytes: max_bytes as u64,
    })
}

/// Parses expression `text` of `field`; `output_len` is allowed only in `args`.
fn expression(
    field: &str,
    text: &str,
    params: &[ParamSpec],
    output_len: bool,
) -> Result<Expr, FieldError> {
    let resolve = |name: &str| -> Result<Var, String> {
        match name {
            "payload_len" => Ok(Var::PayloadLen),
            "output_len" if output_len => Ok(Var::OutputLen),
            "output_len" => Err("output_len is known only in `args`".to_string()),
            _ => match params.iter().position(|p| p.name == name) {
                Some(i) if params[i].ty.is_integer() => Ok(Var::Param(i)),
                Some(_) => Err(format!("parameter `{name}` is an f32; sizes are integers")),
                None => Err(format!(
                    "unknown name `{name}` (not payload_len nor a parameter)"
                )),
            },
        }
    };
    expr::parse(text, &resolve).map_err(|e| FieldError {
        field: field.to_string(),
        reason: format!("{text:?}: {e}"),
    })
}

/// An implementation file's name: relative, inside the folder, no `..`.
fn check_relative(field: &str, name: &str) -> Result<(), FieldError> {
    let path = Path::new(name);
    let inside = !name.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    if !inside {
        return fail(
            field,
            format!(
                "{name:?} must be a path inside the accelerator's folder (relative, without ..)"
            ),
        );
    }
    Ok(())
}

fn read_file(field: &str, name: &str, read: ReadFile<'_>) -> Result<Vec<u8>, FieldError> {
    check_relative(field, name)?;
    read(name).map_err(|reason| FieldError {
        field: field.to_string(),
        reason: format!("{name}: {reason}"),
    })
}

fn opencl(raw: &RawOpenCl, params: &[ParamSpec], read: ReadFile<'_>) -> Result<OpenCl, FieldError> {
    let (kind, file) = match (&raw.source, &raw.binary) {
        (Some(s), None) => (ProgramKind::Source, s),
        (None, Some(b)) => (ProgramKind::Binary, b),
        (Some(_), Some(_)) => return fail("opencl.binary", "give `source` or `binary`, not both"),
        (None, None) => {
            return fail(
                "opencl.source",
                "missing: give `source` (OpenCL C) or `binary`",
            )
        }
    };
    let field = match kind {
        ProgramKind::Source => "opencl.source",
        ProgramKind::Binary => "opencl.binary",
    };
    let program = read_file(field, file, read)?;
    if kind == ProgramKind::Source && std::str::from_utf8(&program).is_err() {
        return fail(field, format!("{file} is not UTF-8 text"));
    }
    // An OpenCL runtime reads a source up to its first NUL, and a length of 0 as "up
    // to the first NUL": an empty one had it read from a dangling pointer, and one
    // with nothing before its first NUL aborts PoCL 3.1 under some build options.
    let text_len = match kind {
        ProgramKind::Source => program
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(program.len()),
        ProgramKind::Binary => program.len(),
    };
    if text_len == 0 {
        return fail(field, format!("{file} is empty"));
    }
    if raw.build_options.len() > TEXT_BYTES_MAX || raw.build_options.contains('\0') {
        return fail(
            "opencl.build_options",
            format!("must be text of at most {TEXT_BYTES_MAX} bytes"),
        );
    }
    check_ident("opencl.kernel", &raw.kernel)?;
    if !(1..=3).contains(&raw.global_size.len()) {
        return fail(
            "opencl.global_size",
            format!("{} expressions: give 1 to 3", raw.global_size.len()),
        );
    }
    if !raw.local_size.is_empty() && raw.local_size.len() != raw.global_size.len() {
        return fail(
            "opencl.local_size",
            format!(
                "{} expressions for {} global dimensions: give as many, or none",
                raw.local_size.len(),
                raw.global_size.len()
            ),
        );
    }
    let sizes = |key: &str, list: &[ExprText]| -> Result<Vec<Expr>, FieldError> {
        list.iter()
            .enumerate()
            .map(|(i, e)| expression(&format!("opencl.{key}[{i}]"), &e.text(), params, false))
            .collect()
    };
    let global_size = sizes("global_size", &raw.global_size)?;
    let local_size = sizes("local_size", &raw.local_size)?;
    if raw.args.len() > ARGS_MAX {
        return fail(
            "opencl.args",
            format!("{} arguments: at most {ARGS_MAX}", raw.args.len()),
        );
    }
    let args = raw
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let field = format!("opencl.args[{i}]");
            Ok(match a.as_str() {
                "payload" => Arg::Payload,
                "output" => Arg::Output,
                "payload_len" => Arg::PayloadLen,
                "output_len" => Arg::OutputLen,
                other => match other.strip_prefix("local:") {
                    Some(size) => Arg::Local(expression(&field, size, params, true)?),
                    None => match params.iter().position(|p| p.name == other) {
                        Some(i) => Arg::Param(i),
                        None => {
                            return fail(
                                field,
                                format!("{other:?} is not payload, output, payload_len, output_len, local:EXPR nor a parameter"),
                            )
                        }
                    },
                },
            })
        })
        .collect::<Result<Vec<_>, FieldError>>()?;
    Ok(OpenCl {
        kind,
        file: file.clone(),
        program,
        build_options: raw.build_options.clone(),
        kernel: raw.kernel.clone(),
        global_size,
        local_size,
        args,
    })
}

fn rtl(raw: &RawRtl, params: &[ParamSpec], read: ReadFile<'_>) -> Result<Rtl, FieldError> {
    if raw.sources.is_empty() || raw.sources.len() > SOURCES_MAX {
        return fail(
            "rtl.sources",
            format!("{} files: give 1 to {SOURCES_MAX}", raw.sources.len()),
        );
    }
    let mut sources = Vec::with_capacity(raw.sources.len());
    for (i, name) in raw.sources.iter().enumerate() {
        let bytes = read_file(&format!("rtl.sources[{i}]"), name, read)?;
        sources.push((name.clone(), bytes));
    }
    check_ident("rtl.top", &raw.top)?;
    let cycles_max = expression("rtl.cycles_max", &raw.cycles_max.text(), params, false)?;
    Ok(Rtl {
        sources,
        top: raw.top.clone(),
        cycles_max,
    })
}
